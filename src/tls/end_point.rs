//! SCRAM channel binding's `tls-server-end-point` (RFC 5929 §4.1): the hash of the server's
//! certificate, with the hash function of the certificate's signature, SHA-256 when that is
//! MD5 or SHA-1. A proxy relaying the handshake to another server cannot forge it.

use ring::digest;

/// The binding data for a server certificate (DER), or None when its signature algorithm
/// names no single hash function (RSA-PSS, Ed25519), where PostgreSQL has none either.
pub fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    let algorithm = match signature_algorithm(cert)? {
        // sha1WithRSAEncryption, md5WithRSAEncryption, sha256WithRSAEncryption,
        // ecdsa-with-SHA1, ecdsa-with-SHA256
        RSA_SHA1 | RSA_MD5 | RSA_SHA256 | ECDSA_SHA1 | ECDSA_SHA256 => &digest::SHA256,
        RSA_SHA384 | ECDSA_SHA384 => &digest::SHA384,
        RSA_SHA512 | ECDSA_SHA512 => &digest::SHA512,
        _ => return None,
    };
    Some(digest::digest(algorithm, cert).as_ref().to_vec())
}

// The algorithm identifiers' object identifiers, DER-encoded.
const RSA_MD5: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04];
const RSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
const RSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
const RSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
const RSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];

const SEQUENCE: u8 = 0x30;
const OBJECT_IDENTIFIER: u8 = 0x06;

/// `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm AlgorithmIdentifier, … }`,
/// `AlgorithmIdentifier ::= SEQUENCE { algorithm OBJECT IDENTIFIER, … }`: the algorithm's
/// identifier, as its DER content bytes.
fn signature_algorithm(cert: &[u8]) -> Option<&[u8]> {
    let (certificate, _) = element(cert, SEQUENCE)?;
    let (_, rest) = any_element(certificate)?;
    let (identifier, _) = element(rest, SEQUENCE)?;
    let (oid, _) = element(identifier, OBJECT_IDENTIFIER)?;
    Some(oid)
}

/// The content of the DER element at the start of `der` if its tag is `tag`, and what follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *der.first()? != tag {
        return None;
    }
    any_element(der)
}

fn any_element(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let first = *der.get(1)?;
    let (len, header) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 {
            return None;
        }
        let bytes = der.get(2..2 + count)?;
        let len = bytes.iter().fold(0usize, |n, b| (n << 8) | *b as usize);
        (len, 2 + count)
    };
    let end = header.checked_add(len)?;
    Some((der.get(header..end)?, der.get(end..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate's shape with made-up contents: SEQUENCE { SEQUENCE {…}, SEQUENCE { OID } }.
    fn certificate_signed_with(oid: &[u8], tbs_len: usize) -> Vec<u8> {
        let mut tbs = vec![SEQUENCE, 0x82, (tbs_len >> 8) as u8, tbs_len as u8];
        tbs.extend(std::iter::repeat_n(0u8, tbs_len));
        let mut algorithm = vec![SEQUENCE, (oid.len() + 2) as u8, OBJECT_IDENTIFIER];
        algorithm.push(oid.len() as u8);
        algorithm.extend_from_slice(oid);
        let body = [tbs, algorithm].concat();
        let mut cert = vec![SEQUENCE, 0x82, (body.len() >> 8) as u8, body.len() as u8];
        cert.extend(body);
        cert
    }

    #[test]
    fn the_hash_follows_the_signature_algorithm() {
        let cert = certificate_signed_with(ECDSA_SHA384, 300);
        assert_eq!(server_end_point(&cert).unwrap().len(), 48);
        let cert = certificate_signed_with(RSA_SHA1, 300);
        let hash = server_end_point(&cert).unwrap();
        assert_eq!(hash, digest::digest(&digest::SHA256, &cert).as_ref());
        let ed25519 = [0x2b, 0x65, 0x70];
        assert_eq!(
            server_end_point(&certificate_signed_with(&ed25519, 10)),
            None
        );
    }

    #[test]
    fn truncated_certificates_have_no_binding() {
        let cert = certificate_signed_with(RSA_SHA256, 300);
        for len in 0..cert.len() {
            assert_eq!(server_end_point(&cert[..len]), None, "{len}");
        }
    }
}
