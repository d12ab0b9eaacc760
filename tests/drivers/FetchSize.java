// pgjdbc's setFetchSize inside a transaction: the driver reads a multi-shard ORDER BY through a
// portal executed a batch of rows at a time. Every row must come once, in the query's order.
// Arguments: the proxy's address (host:port), the table (id bigint, grp int, pad text), its row
// count.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;

public class FetchSize {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + "/app?user=app&password=app&sslmode=disable";
        String table = args[1];
        long n = Long.parseLong(args[2]);
        try (Connection conn = DriverManager.getConnection(url)) {
            conn.setAutoCommit(false);
            try (PreparedStatement st = conn.prepareStatement(
                    "SELECT id, grp FROM " + table + " WHERE id > ? ORDER BY grp, id DESC")) {
                st.setFetchSize(1000);
                st.setLong(1, 10);
                long count = 0;
                int lastGrp = -1;
                long lastId = Long.MAX_VALUE;
                try (ResultSet rs = st.executeQuery()) {
                    while (rs.next()) {
                        long id = rs.getLong(1);
                        int grp = rs.getInt(2);
                        if (grp != id % 7) throw new AssertionError("row " + id + " has group " + grp);
                        if (grp < lastGrp || (grp == lastGrp && id >= lastId)) {
                            throw new AssertionError("out of order at " + id);
                        }
                        lastGrp = grp;
                        lastId = id;
                        count++;
                    }
                }
                if (count != n - 10) throw new AssertionError(count + " rows, not " + (n - 10));
                System.out.println("pgjdbc fetch size 1000: " + count + " rows in order");
            }
            conn.commit();
        }
    }
}
