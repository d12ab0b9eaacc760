//! Where the proxy's users and their secrets come from: `[[users]]` in the configuration. SCRAM
//! secrets are salted once at start; an unknown user gets a dummy secret so that a failed login
//! costs the same time whether or not the user exists.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use pgwire::api::auth::md5pass::{hash_md5_password, Md5PasswordAuth};
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::PgWireResult;
use rand::RngCore;

use crate::config::{AuthMethod, Config};

const SCRAM_ITERATIONS: usize = 4096;

#[derive(Debug)]
struct ScramSecret {
    salt: Vec<u8>,
    salted_password: Vec<u8>,
}

impl ScramSecret {
    fn new(password: &str) -> ScramSecret {
        let mut salt = vec![0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        let salted_password = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
        ScramSecret {
            salt,
            salted_password,
        }
    }
}

/// The configured users, ready for either authentication method.
#[derive(Debug)]
pub struct Users {
    method: AuthMethod,
    passwords: HashMap<String, String>,
    scram: HashMap<String, ScramSecret>,
    unknown_scram: ScramSecret,
    unknown_password: String,
}

impl Users {
    pub fn new(config: &Config) -> Users {
        let passwords: HashMap<String, String> = config
            .users
            .iter()
            .map(|u| (u.name.clone(), u.password.clone()))
            .collect();
        let scram = match config.proxy.auth_method {
            AuthMethod::ScramSha256 => passwords
                .iter()
                .map(|(n, p)| (n.clone(), ScramSecret::new(p)))
                .collect(),
            AuthMethod::Md5 => HashMap::new(),
        };
        let mut random = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut random);
        let unknown_password: String = random.iter().map(|b| format!("{b:02x}")).collect();
        Users {
            method: config.proxy.auth_method,
            passwords,
            scram,
            unknown_scram: ScramSecret::new(&unknown_password),
            unknown_password,
        }
    }

    pub fn exists(&self, name: &str) -> bool {
        self.passwords.contains_key(name)
    }

    /// The mechanism factory for the configured method.
    pub fn mechanism(self: &Arc<Self>) -> Arc<dyn AuthMechanismFactory> {
        match self.method {
            AuthMethod::ScramSha256 => {
                Arc::new(ScramAuth::new(Arc::new(ScramSource(self.clone()))))
            }
            AuthMethod::Md5 => Arc::new(Md5PasswordAuth::new(Arc::new(Md5Source(self.clone())))),
        }
    }
}

#[derive(Debug)]
struct ScramSource(Arc<Users>);

#[async_trait]
impl AuthSource for ScramSource {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let users = &self.0;
        let secret = login
            .user()
            .and_then(|u| users.scram.get(u))
            .unwrap_or(&users.unknown_scram);
        Ok(Password::new(
            Some(secret.salt.clone()),
            secret.salted_password.clone(),
        ))
    }
}

#[derive(Debug)]
struct Md5Source(Arc<Users>);

#[async_trait]
impl AuthSource for Md5Source {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let users = &self.0;
        let user = login.user().unwrap_or_default();
        let password = users.passwords.get(user).unwrap_or(&users.unknown_password);
        let mut salt = vec![0u8; 4];
        rand::thread_rng().fill_bytes(&mut salt);
        let hashed = hash_md5_password(user, password, &salt);
        Ok(Password::new(Some(salt), hashed.into_bytes()))
    }
}
