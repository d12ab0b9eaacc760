-- Read queries of the differential test (tests/differential.rs): each runs through the proxy
-- (simple protocol, extended protocol with text results, prepared with binary results) and on
-- one plain PostgreSQL holding the same rows; the answers must be identical.
--
-- Format:
--   * A query starts at its first non-comment, non-blank line and ends at the first line that
--     ends with `;` (so no `;` at a line end inside a query). It may span several lines.
--   * Lines starting with `--` between queries are comments, except two directives that apply
--     to the next query:
--       -- unordered          compare the rows as sorted multisets (the query has no ORDER BY,
--                             or one that does not order totally)
--       -- refused: <why>     the proxy must refuse the query with SQLSTATE 0A000
--       -- session: <sql>     run <sql> (a SET, say) first on every connection, proxy and
--                             reference alike; it stays in effect for the queries after it
--   * Every other query must order its rows totally: ORDER BY a unique column (or all the
--     output columns) last. Window functions, string_agg/array_agg and DISTINCT ON must order
--     totally within their partitions too: the shards' rows reach PostgreSQL in another
--     physical order than the reference table's.
--   * No float8 aggregates, no volatile functions.
--
-- Tables (see TABLES in differential.rs):
--   family 1: df_customers(cust_id) -> df_orders(cust_id, order_id) -> df_order_lines(cust_id,
--             order_id, line_no); order_id is unique over all orders
--   family 2: df_accounts(acct_id) -> df_events(acct_id, event_id); event_id unique
--   duplicated: df_products(product_id); unsharded: df_regions(region_id)

-- ===== Plain aggregates over a whole table ==================================================
SELECT count(*) FROM df_customers;
SELECT count(*), count(name), count(city), count(tier), count(score), count(balance), count(rating), count(active), count(signup), count(last_seen), count(region_id) FROM df_customers;
SELECT sum(tier), sum(score), sum(cust_id), sum(balance), sum(rating), sum(region_id) FROM df_customers;
SELECT min(tier), max(tier), min(score), max(score), min(balance), max(balance), min(rating), max(rating) FROM df_customers;
SELECT avg(tier), avg(score), avg(cust_id), avg(balance), avg(rating) FROM df_customers;
SELECT min(name), max(name), min(city), max(city) FROM df_customers;
SELECT min(signup), max(signup), min(last_seen), max(last_seen) FROM df_customers;
SELECT bool_and(active), bool_or(active), every(active) FROM df_customers;
SELECT count(*) FILTER (WHERE active), count(*) FILTER (WHERE NOT active), count(*) FILTER (WHERE active IS NULL) FROM df_customers;
SELECT sum(amount) FILTER (WHERE gift), avg(qty) FILTER (WHERE status = 'shipped'), max(placed_at) FILTER (WHERE prio > 5) FROM df_orders;
SELECT count(*), sum(qty), sum(amount), sum(discount), avg(amount), avg(discount), sum(prio), avg(prio) FROM df_orders;
SELECT min(placed_at), max(placed_at), min(ship_date), max(ship_date) FROM df_orders;
SELECT count(*), sum(qty), sum(price), avg(price), max(price), min(price), avg(qty) FROM df_order_lines;
SELECT sum(weight), avg(weight), sum(value), avg(value), min(value), max(value), sum(small), avg(small) FROM df_events;
SELECT sum(credit), avg(credit), sum(big), avg(big), sum(flags), avg(flags), min(opened), max(opened) FROM df_accounts;
SELECT stddev(score), variance(score), stddev_pop(score), var_pop(score), stddev_samp(balance), var_samp(balance) FROM df_customers;
SELECT stddev(amount), variance(qty), stddev(prio), var_pop(discount) FROM df_orders;
SELECT stddev(value), variance(weight), stddev(small), variance(small) FROM df_events;
SELECT stddev(big), var_samp(credit), stddev_pop(flags) FROM df_accounts;
SELECT round(avg(balance), 2), round(avg(rating), 3), round(stddev(score), 4) FROM df_customers;
SELECT sum(amount) / count(qty), sum(qty)::numeric / nullif(count(*), 0), sum(amount) - sum(discount) FROM df_orders;
SELECT count(DISTINCT cust_id), count(DISTINCT order_id) FROM df_orders;
SELECT count(DISTINCT status), count(DISTINCT qty), count(DISTINCT gift), count(DISTINCT ship_date) FROM df_orders;
SELECT count(DISTINCT city), count(DISTINCT name), count(DISTINCT tier) FROM df_customers;
SELECT count(DISTINCT (cust_id, status)) FROM df_orders;
SELECT sum(DISTINCT qty), avg(DISTINCT prio), count(DISTINCT amount) FROM df_orders;
SELECT count(DISTINCT acct_id), count(DISTINCT kind), sum(DISTINCT small) FROM df_events;
SELECT string_agg(name, '|' ORDER BY name, cust_id) FROM df_customers WHERE cust_id < 40;
SELECT array_agg(cust_id ORDER BY cust_id) FROM df_customers WHERE tier = 1;
SELECT string_agg(DISTINCT city, ',' ORDER BY city) FROM df_customers;
SELECT array_agg(DISTINCT status ORDER BY status) FROM df_orders;
SELECT array_agg(amount ORDER BY amount DESC NULLS LAST, order_id) FROM df_orders WHERE cust_id < 15;
SELECT string_agg(kind, ';' ORDER BY event_id DESC) FROM df_events WHERE acct_id BETWEEN 1010 AND 1030;
SELECT json_agg(name ORDER BY cust_id), jsonb_agg(city ORDER BY cust_id) FROM df_customers WHERE cust_id <= 12;
SELECT max(amount) - min(amount), max(placed_at) - min(placed_at) FROM df_orders;
SELECT count(*) FROM df_orders WHERE amount > 500;
SELECT count(*) FROM df_customers WHERE name IS NULL;
SELECT count(*) FROM df_order_lines WHERE note = '';
SELECT count(*), sum(qty) FROM df_order_lines WHERE product_id IS NULL;
SELECT count(*) FROM df_events WHERE kind LIKE 'log%';
SELECT bool_and(ok), bool_or(ok), every(ok IS NOT NULL) FROM df_events;
SELECT bool_and(gift) FILTER (WHERE qty > 5), bool_or(gift) FILTER (WHERE qty < 2) FROM df_orders;
SELECT bool_and(verified), bool_or(verified), count(*) FILTER (WHERE verified IS NOT TRUE) FROM df_accounts;
SELECT min(length(name)), max(length(name)), sum(length(name)), sum(octet_length(name)) FROM df_customers;
SELECT count(*) FROM df_products;
SELECT count(*), sum(list_price), avg(stock), bool_or(discontinued) FROM df_products;
SELECT count(*), sum(tz), max(rname), sum(big) FROM df_regions;
SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY amount), mode() WITHIN GROUP (ORDER BY status) FROM df_orders;
SELECT percentile_disc(ARRAY[0.1, 0.5, 0.9]) WITHIN GROUP (ORDER BY value) FROM df_events;
SELECT count(*) FROM df_orders WHERE amount IS NULL AND qty IS NOT NULL;
SELECT sum(coalesce(qty, 0) * coalesce(amount, 0)), sum(qty * amount) FROM df_orders;
SELECT sum(balance * rating), max(balance / 3), min(rating * 2) FROM df_customers;
SELECT count(*) FROM df_customers HAVING count(*) > 10;
SELECT count(*) FROM df_customers HAVING count(*) > 100000;
SELECT sum(score) FROM df_customers WHERE false;
SELECT count(*), max(name) FROM df_customers WHERE cust_id < 0;

-- ===== Single sharding-key value and IN lists ===============================================
SELECT * FROM df_customers WHERE cust_id = 43;
SELECT * FROM df_orders WHERE cust_id = 43 ORDER BY order_id;
SELECT count(*), sum(amount) FROM df_orders WHERE cust_id = 43;
SELECT o.order_id, l.line_no, l.price FROM df_orders o JOIN df_order_lines l ON l.cust_id = o.cust_id AND l.order_id = o.order_id WHERE o.cust_id = 43 ORDER BY 1, 2;
SELECT * FROM df_customers WHERE cust_id IN (1, 2, 3, 250, 499) ORDER BY cust_id;
SELECT cust_id, count(*), sum(qty) FROM df_orders WHERE cust_id IN (5, 6, 7, 300) GROUP BY cust_id ORDER BY cust_id;
SELECT * FROM df_events WHERE acct_id = 1200 ORDER BY event_id;
SELECT * FROM df_events WHERE acct_id IN (1001, 1100, 1399) ORDER BY event_id;
SELECT count(*), sum(qty) FROM df_order_lines WHERE cust_id = ANY ('{10,20,30}'::bigint[]);
SELECT * FROM df_customers WHERE cust_id = 100000;
SELECT cust_id, name FROM df_customers WHERE cust_id BETWEEN 100 AND 120 ORDER BY 1;
SELECT * FROM df_orders WHERE cust_id = 9 AND order_id > 0 ORDER BY amount NULLS FIRST, order_id;
SELECT order_id, row_number() OVER (ORDER BY order_id), sum(amount) OVER (ORDER BY order_id) FROM df_orders WHERE cust_id = 43 ORDER BY 1;
SELECT status, count(*) FROM df_orders WHERE cust_id IN (11, 12, 13, 14, 15, 16, 17, 18) GROUP BY status ORDER BY status;
SELECT c.name, o.order_id, o.amount FROM df_customers c JOIN df_orders o ON o.cust_id = c.cust_id WHERE c.cust_id = 77 ORDER BY o.order_id;
SELECT c.cust_id, count(l.line_no) FROM df_customers c LEFT JOIN df_order_lines l ON l.cust_id = c.cust_id WHERE c.cust_id IN (2, 4, 8, 16, 32, 64, 128, 256) GROUP BY c.cust_id ORDER BY 1;
SELECT a.acct_id, a.label, e.event_id, e.kind FROM df_accounts a JOIN df_events e ON e.acct_id = a.acct_id WHERE a.acct_id = 1050 ORDER BY e.event_id;
SELECT * FROM df_orders WHERE cust_id IN (SELECT 3 UNION SELECT 4) ORDER BY order_id;
SELECT cust_id, name FROM df_customers WHERE cust_id = 5 OR cust_id = 400 ORDER BY cust_id;
SELECT count(*) FROM df_orders WHERE cust_id NOT IN (1, 2, 3);

-- ===== GROUP BY ================================================================================
SELECT tier, count(*), sum(score), avg(balance), min(name), max(city) FROM df_customers GROUP BY tier ORDER BY tier NULLS FIRST;
SELECT city, count(*), sum(balance), round(avg(score), 2) FROM df_customers GROUP BY city ORDER BY city;
SELECT active, count(*), bool_or(tier > 2), bool_and(score > 0) FROM df_customers GROUP BY active ORDER BY active;
SELECT status, count(*), sum(amount), avg(qty), max(placed_at), min(ship_date) FROM df_orders GROUP BY status ORDER BY status;
SELECT status, gift, count(*), sum(discount) FROM df_orders GROUP BY status, gift ORDER BY status, gift;
SELECT cust_id, count(*), sum(amount) FROM df_orders GROUP BY cust_id ORDER BY cust_id;
SELECT cust_id, count(*), sum(amount) FROM df_orders GROUP BY cust_id ORDER BY sum(amount) DESC NULLS LAST, cust_id LIMIT 10;
SELECT cust_id, count(*) FROM df_orders GROUP BY cust_id ORDER BY count(*) DESC, cust_id LIMIT 15 OFFSET 5;
SELECT prio, count(*), sum(qty), avg(amount) FROM df_orders GROUP BY prio ORDER BY prio;
SELECT product_id, count(*), sum(qty), sum(price * qty) FROM df_order_lines GROUP BY product_id ORDER BY product_id;
SELECT kind, count(*), sum(weight), avg(value), bool_and(ok) FROM df_events GROUP BY kind ORDER BY kind;
SELECT acct_id, count(*), sum(value) FROM df_events GROUP BY acct_id HAVING count(*) > 6 ORDER BY acct_id;
SELECT date_trunc('month', placed_at), count(*), sum(amount) FROM df_orders GROUP BY 1 ORDER BY 1;
SELECT extract(year FROM signup), count(*) FROM df_customers GROUP BY 1 ORDER BY 1;
SELECT extract(dow FROM ship_date) AS dow, count(*) FROM df_orders GROUP BY dow ORDER BY dow;
SELECT date_trunc('day', at)::date, count(*) FROM df_events WHERE at IS NOT NULL GROUP BY 1 ORDER BY 1 LIMIT 20;
SELECT extract(hour FROM at), count(*), sum(weight) FROM df_events GROUP BY 1 ORDER BY 1;
SELECT to_char(signup, 'YYYY-MM'), count(*) FROM df_customers GROUP BY 1 ORDER BY 1;
SELECT grouping(tier, active), tier, active, count(*), sum(score) FROM df_customers GROUP BY ROLLUP (tier, active) ORDER BY grouping(tier, active), tier, active;
SELECT grouping(status, gift), status, gift, count(*) FROM df_orders GROUP BY GROUPING SETS ((status), (gift), ()) ORDER BY 1, 2, 3;
SELECT grouping(tier, active), tier, active, count(*) FROM df_customers GROUP BY CUBE (tier, active) ORDER BY 1, 2, 3;
SELECT length(name) % 3, count(*) FROM df_customers GROUP BY 1 ORDER BY 1 NULLS FIRST;
SELECT floor(balance / 1000) AS b, count(*), sum(balance) FROM df_customers GROUP BY b ORDER BY b;
SELECT tier, string_agg(name, ',' ORDER BY name DESC, cust_id) FROM df_customers WHERE cust_id <= 100 GROUP BY tier ORDER BY tier;
SELECT status, array_agg(order_id ORDER BY amount DESC NULLS LAST, order_id) FROM df_orders WHERE cust_id < 30 GROUP BY status ORDER BY status;
SELECT category, count(*), sum(stock) FROM df_products GROUP BY category ORDER BY category;
SELECT country, count(*), sum(tz) FROM df_regions GROUP BY country ORDER BY country;
SELECT status, count(DISTINCT cust_id), count(DISTINCT qty) FROM df_orders GROUP BY status ORDER BY status;
SELECT cust_id, count(DISTINCT status) FROM df_orders GROUP BY cust_id ORDER BY 2 DESC, 1 LIMIT 12;
SELECT tier, stddev(score), variance(balance) FROM df_customers GROUP BY tier ORDER BY tier;
SELECT kind, percentile_disc(0.9) WITHIN GROUP (ORDER BY value) FROM df_events GROUP BY kind ORDER BY kind;
SELECT verified, count(*), sum(credit), avg(big) FROM df_accounts GROUP BY verified ORDER BY verified NULLS FIRST;
SELECT flags % 4, count(*), min(label), max(label) FROM df_accounts GROUP BY 1 ORDER BY 1;
SELECT line_no, count(*), sum(qty), avg(price) FROM df_order_lines GROUP BY line_no ORDER BY line_no;
SELECT note, count(*) FROM df_order_lines GROUP BY note ORDER BY note NULLS FIRST;
SELECT ok, small > 0, count(*), sum(value) FROM df_events GROUP BY 1, 2 ORDER BY 1, 2;
SELECT cust_id % 10, count(*), sum(amount) FROM df_orders GROUP BY cust_id % 10 ORDER BY 1;
SELECT gift, prio, count(*) FROM df_orders GROUP BY 1, 2 ORDER BY 1, 2;
SELECT region_id, count(*), round(avg(balance), 2) FROM df_customers GROUP BY region_id ORDER BY region_id;
SELECT cust_id, order_id, count(*), sum(qty) FROM df_order_lines GROUP BY cust_id, order_id ORDER BY sum(qty) DESC NULLS LAST, order_id LIMIT 20;

-- ===== HAVING ==================================================================================
SELECT city, count(*) FROM df_customers GROUP BY city HAVING count(*) > 30 ORDER BY city;
SELECT status, sum(amount) FROM df_orders GROUP BY status HAVING sum(amount) > 50000 ORDER BY status;
SELECT cust_id FROM df_orders GROUP BY cust_id HAVING count(*) >= 5 AND max(amount) > 900 ORDER BY cust_id;
SELECT cust_id FROM df_orders GROUP BY cust_id HAVING bool_or(gift) AND NOT bool_and(gift) ORDER BY cust_id;
SELECT cust_id, min(placed_at) FROM df_orders GROUP BY cust_id HAVING min(placed_at) < '2023-02-01 00:00:00+00' ORDER BY cust_id;
SELECT cust_id FROM df_orders GROUP BY cust_id HAVING count(DISTINCT status) = 1 ORDER BY cust_id;
SELECT cust_id, sum(amount) / nullif(count(*), 0) FROM df_orders GROUP BY cust_id HAVING sum(amount) / nullif(count(*), 0) > 700 ORDER BY cust_id;
SELECT kind, avg(value) FROM df_events GROUP BY kind HAVING avg(value) > (SELECT avg(value) FROM df_events) ORDER BY kind;
SELECT tier FROM df_customers GROUP BY tier HAVING sum(score) > 1000000 ORDER BY tier;
SELECT acct_id, sum(weight) FROM df_events GROUP BY acct_id HAVING sum(weight) < -2000000000000 ORDER BY acct_id;
SELECT product_id, count(*) FROM df_order_lines GROUP BY product_id HAVING count(*) BETWEEN 20 AND 40 ORDER BY product_id;
SELECT status FROM df_orders GROUP BY status HAVING max(amount) - min(amount) > 1000 OR status IS NULL ORDER BY status;
SELECT cust_id, string_agg(status, ',' ORDER BY order_id) FROM df_orders GROUP BY cust_id HAVING count(*) = 6 ORDER BY cust_id;
SELECT city, tier, count(*) FROM df_customers GROUP BY city, tier HAVING count(*) >= 8 ORDER BY city, tier;
SELECT status, count(*) FROM df_orders GROUP BY status HAVING count(*) > 99999 ORDER BY status;

-- ===== DISTINCT ================================================================================
SELECT DISTINCT city FROM df_customers ORDER BY city;
SELECT DISTINCT tier, active FROM df_customers ORDER BY tier, active;
SELECT DISTINCT status FROM df_orders ORDER BY status NULLS FIRST;
SELECT DISTINCT cust_id FROM df_orders WHERE amount > 800 ORDER BY cust_id;
SELECT DISTINCT ON (cust_id) cust_id, order_id, amount FROM df_orders ORDER BY cust_id, amount DESC NULLS LAST, order_id;
SELECT DISTINCT ON (status) status, order_id, placed_at FROM df_orders ORDER BY status, placed_at, order_id;
SELECT DISTINCT ON (city) city, name, cust_id FROM df_customers ORDER BY city, cust_id;
SELECT DISTINCT ON (kind) kind, event_id, value FROM df_events ORDER BY kind DESC, value NULLS FIRST, event_id;
SELECT DISTINCT extract(month FROM placed_at) FROM df_orders ORDER BY 1;
-- unordered
SELECT DISTINCT kind FROM df_events;
-- unordered
SELECT DISTINCT product_id FROM df_order_lines;
-- unordered
SELECT DISTINCT cust_id, status FROM df_orders WHERE cust_id < 100;
SELECT count(*) FROM (SELECT DISTINCT cust_id, status FROM df_orders) d;
SELECT DISTINCT rating FROM df_customers ORDER BY rating;
SELECT DISTINCT discount FROM df_orders WHERE discount > 2 ORDER BY discount;
SELECT DISTINCT category, discontinued FROM df_products ORDER BY 1, 2;
SELECT DISTINCT l.product_id, p.category FROM df_order_lines l JOIN df_products p USING (product_id) ORDER BY 1, 2;

-- ===== ORDER BY / LIMIT / OFFSET over plain rows ==============================================
SELECT cust_id, name FROM df_customers ORDER BY name, cust_id LIMIT 25;
SELECT cust_id, name FROM df_customers ORDER BY name DESC NULLS LAST, cust_id LIMIT 25;
SELECT cust_id, name FROM df_customers ORDER BY name NULLS FIRST, cust_id LIMIT 25 OFFSET 10;
SELECT order_id, amount FROM df_orders ORDER BY amount DESC, order_id LIMIT 20;
SELECT order_id, amount FROM df_orders ORDER BY amount NULLS FIRST, order_id LIMIT 20;
SELECT order_id, placed_at FROM df_orders ORDER BY placed_at DESC NULLS LAST, order_id LIMIT 10 OFFSET 100;
SELECT * FROM df_customers ORDER BY cust_id LIMIT 30;
SELECT * FROM df_orders ORDER BY order_id OFFSET 1400;
SELECT * FROM df_order_lines ORDER BY order_id, line_no LIMIT 50;
SELECT * FROM df_events ORDER BY event_id LIMIT 40 OFFSET 7;
SELECT * FROM df_accounts ORDER BY acct_id;
SELECT * FROM df_products ORDER BY product_id;
SELECT * FROM df_regions ORDER BY region_id;
SELECT city, cust_id FROM df_customers ORDER BY city COLLATE "C", cust_id LIMIT 40;
SELECT name FROM df_customers WHERE name > 'Z' ORDER BY name, cust_id;
SELECT upper(name), lower(city), cust_id FROM df_customers ORDER BY cust_id LIMIT 30;
SELECT cust_id, balance FROM df_customers ORDER BY balance DESC NULLS FIRST, cust_id LIMIT 5;
SELECT event_id, value FROM df_events ORDER BY value, event_id LIMIT 30;
SELECT order_id, gift, prio FROM df_orders ORDER BY gift, prio DESC, order_id LIMIT 30;
SELECT order_id FROM df_orders ORDER BY order_id LIMIT 0;
SELECT order_id FROM df_orders ORDER BY order_id LIMIT ALL OFFSET 1000000;
SELECT order_id, ship_date FROM df_orders ORDER BY ship_date NULLS FIRST, order_id LIMIT 12;
-- unordered
SELECT order_id, qty FROM df_orders ORDER BY qty DESC NULLS LAST FETCH FIRST 5 ROWS WITH TIES;
SELECT order_id, amount * qty FROM df_orders ORDER BY amount * qty DESC NULLS LAST, order_id LIMIT 10;
SELECT order_id, amount FROM df_orders ORDER BY 2 DESC NULLS LAST, 1 LIMIT 10;
SELECT acct_id, credit FROM df_accounts ORDER BY credit NULLS FIRST, acct_id LIMIT 15 OFFSET 3;
SELECT event_id, at FROM df_events ORDER BY at DESC, event_id DESC LIMIT 25;
SELECT cust_id, signup FROM df_customers ORDER BY signup NULLS FIRST, cust_id DESC LIMIT 20;
SELECT cust_id, last_seen FROM df_customers WHERE last_seen IS NOT NULL ORDER BY last_seen, cust_id LIMIT 20;
SELECT order_id, line_no, note FROM df_order_lines ORDER BY note DESC NULLS FIRST, order_id, line_no LIMIT 30;
SELECT cust_id, tier, score FROM df_customers ORDER BY tier NULLS FIRST, score DESC NULLS LAST, cust_id LIMIT 40;
SELECT event_id, small, weight FROM df_events ORDER BY small, weight, event_id LIMIT 25;
SELECT order_id, discount FROM df_orders WHERE discount IS NOT NULL ORDER BY discount DESC, order_id LIMIT 20;
SELECT cust_id, rating FROM df_customers ORDER BY rating NULLS FIRST, cust_id LIMIT 20;
-- unordered
SELECT cust_id, name, city, balance FROM df_customers;
-- unordered
SELECT * FROM df_events WHERE acct_id < 1050;
-- unordered
SELECT order_id, status FROM df_orders WHERE status IS NULL;
-- unordered
SELECT * FROM df_order_lines WHERE qty > 8 AND price > 250;
SELECT cust_id, name FROM df_customers WHERE city = 'Zürich' ORDER BY cust_id;
SELECT cust_id, name FROM df_customers WHERE name LIKE '%ü%' OR name LIKE '東京%' ORDER BY cust_id;
SELECT order_id FROM df_orders WHERE status = '' ORDER BY order_id;

-- ===== Text ordering (C collation), NULL ordering ==============================================
SELECT name, count(*) FROM df_customers GROUP BY name ORDER BY name;
SELECT name, count(*) FROM df_customers GROUP BY name ORDER BY name DESC NULLS LAST;
SELECT DISTINCT note FROM df_order_lines ORDER BY note NULLS FIRST;
SELECT left(name, 1) AS initial, count(*) FROM df_customers GROUP BY 1 ORDER BY 1;
SELECT min(note), max(note) FROM df_order_lines;
SELECT cust_id, name || '/' || coalesce(city, '?') FROM df_customers ORDER BY 2, 1 LIMIT 30;
SELECT kind, count(*) FROM df_events GROUP BY kind ORDER BY kind DESC NULLS FIRST;
SELECT label, count(*) FROM df_accounts GROUP BY label ORDER BY label NULLS FIRST;
SELECT title FROM df_products ORDER BY title NULLS FIRST, product_id;
SELECT city FROM df_customers UNION SELECT rname FROM df_regions ORDER BY 1 DESC NULLS LAST;
SELECT cust_id, city FROM df_customers ORDER BY city < 'M', city, cust_id LIMIT 30;
SELECT substr(name, 2, 3), reverse(city), cust_id FROM df_customers ORDER BY cust_id DESC LIMIT 20;
SELECT max(name COLLATE "C"), min(city COLLATE "C") FROM df_customers;

-- ===== Window functions ========================================================================
SELECT cust_id, order_id, row_number() OVER (PARTITION BY cust_id ORDER BY order_id) FROM df_orders WHERE cust_id < 50 ORDER BY cust_id, order_id;
SELECT order_id, rank() OVER (ORDER BY amount DESC NULLS LAST), dense_rank() OVER (ORDER BY amount DESC NULLS LAST) FROM df_orders ORDER BY order_id LIMIT 100;
SELECT cust_id, order_id, sum(amount) OVER (PARTITION BY cust_id ORDER BY order_id) FROM df_orders ORDER BY cust_id, order_id LIMIT 200;
SELECT order_id, amount, lag(amount) OVER (ORDER BY order_id), lead(amount, 2) OVER (ORDER BY order_id) FROM df_orders ORDER BY order_id;
SELECT cust_id, name, ntile(4) OVER (ORDER BY cust_id) FROM df_customers ORDER BY cust_id;
SELECT tier, cust_id, percent_rank() OVER (PARTITION BY tier ORDER BY score, cust_id), cume_dist() OVER (PARTITION BY tier ORDER BY score, cust_id) FROM df_customers ORDER BY cust_id;
SELECT status, order_id, first_value(order_id) OVER w, last_value(order_id) OVER w, nth_value(order_id, 3) OVER w FROM df_orders WINDOW w AS (PARTITION BY status ORDER BY order_id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) ORDER BY order_id LIMIT 100;
SELECT cust_id, count(*) OVER (PARTITION BY city), sum(balance) OVER (PARTITION BY city), max(name) OVER (PARTITION BY tier) FROM df_customers ORDER BY cust_id;
SELECT acct_id, event_id, sum(value) OVER (PARTITION BY acct_id ORDER BY at NULLS FIRST, event_id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM df_events ORDER BY acct_id, event_id;
SELECT status, sum(amount), rank() OVER (ORDER BY sum(amount) DESC NULLS LAST) FROM df_orders GROUP BY status ORDER BY status;
SELECT * FROM (SELECT cust_id, order_id, amount, row_number() OVER (PARTITION BY cust_id ORDER BY amount DESC NULLS LAST, order_id) rn FROM df_orders) t WHERE rn <= 2 ORDER BY cust_id, rn;
SELECT cust_id, order_id, lag(status, 1, 'none') OVER (PARTITION BY cust_id ORDER BY order_id) FROM df_orders ORDER BY order_id LIMIT 150;
SELECT kind, event_id, row_number() OVER (PARTITION BY kind ORDER BY value DESC NULLS LAST, event_id) FROM df_events ORDER BY kind, 3 LIMIT 120;
SELECT order_id, sum(qty) OVER (ORDER BY placed_at NULLS FIRST, order_id), avg(amount) OVER (ORDER BY order_id ROWS BETWEEN 3 PRECEDING AND 3 FOLLOWING) FROM df_orders ORDER BY order_id LIMIT 300;
SELECT cust_id, rank() OVER (ORDER BY city), dense_rank() OVER (ORDER BY tier NULLS FIRST) FROM df_customers ORDER BY cust_id;
SELECT event_id, sum(weight) OVER (PARTITION BY acct_id), count(ok) OVER (PARTITION BY acct_id ORDER BY event_id) FROM df_events ORDER BY event_id;
SELECT cust_id, balance, sum(balance) OVER (ORDER BY balance RANGE BETWEEN 100 PRECEDING AND 100 FOLLOWING) FROM df_customers ORDER BY cust_id LIMIT 100;
SELECT line_no, order_id, lead(product_id) OVER (PARTITION BY order_id ORDER BY line_no), first_value(price) OVER (PARTITION BY cust_id ORDER BY order_id, line_no) FROM df_order_lines ORDER BY order_id, line_no LIMIT 200;
SELECT acct_id, string_agg(kind, ',') OVER (PARTITION BY acct_id ORDER BY event_id), event_id FROM df_events WHERE acct_id < 1040 ORDER BY event_id;
SELECT tier, count(*), sum(count(*)) OVER (ORDER BY tier), row_number() OVER (ORDER BY count(*) DESC, tier) FROM df_customers GROUP BY tier ORDER BY tier;

-- ===== Subqueries and CTEs spanning shards =====================================================
SELECT cust_id, name FROM df_customers WHERE balance > (SELECT avg(balance) FROM df_customers) ORDER BY cust_id;
SELECT count(*) FROM df_customers c WHERE EXISTS (SELECT 1 FROM df_orders o WHERE o.cust_id = c.cust_id AND o.amount > 900);
SELECT cust_id FROM df_customers c WHERE NOT EXISTS (SELECT 1 FROM df_orders o WHERE o.cust_id = c.cust_id) ORDER BY cust_id;
SELECT cust_id FROM df_customers WHERE cust_id IN (SELECT cust_id FROM df_accounts WHERE verified) ORDER BY 1;
SELECT acct_id FROM df_accounts WHERE cust_id NOT IN (SELECT cust_id FROM df_customers) ORDER BY 1;
SELECT count(*) FROM df_customers WHERE tier NOT IN (SELECT prio FROM df_orders);
SELECT count(*) FROM df_customers WHERE tier NOT IN (SELECT prio FROM df_orders WHERE prio IS NOT NULL);
SELECT c.cust_id, (SELECT count(*) FROM df_orders o WHERE o.cust_id = c.cust_id), (SELECT max(amount) FROM df_orders o WHERE o.cust_id = c.cust_id) FROM df_customers c ORDER BY c.cust_id LIMIT 60;
WITH t AS (SELECT cust_id, sum(amount) s FROM df_orders GROUP BY cust_id) SELECT c.city, sum(t.s), count(*) FROM t JOIN df_customers c USING (cust_id) GROUP BY c.city ORDER BY c.city;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT n.i, count(o.order_id) FROM n LEFT JOIN df_orders o ON o.prio = n.i GROUP BY n.i ORDER BY n.i;
WITH s AS (SELECT status, count(*) n FROM df_orders GROUP BY status) SELECT a.status, a.n, (SELECT count(*) FROM s b WHERE b.n <= a.n) FROM s a ORDER BY a.status;
SELECT tier, avg(cnt), max(cnt) FROM (SELECT c.tier, count(o.order_id) cnt FROM df_customers c LEFT JOIN df_orders o USING (cust_id) GROUP BY c.cust_id, c.tier) x GROUP BY tier ORDER BY tier;
SELECT order_id FROM df_orders WHERE amount > ALL (SELECT list_price * 4 FROM df_products WHERE list_price IS NOT NULL) ORDER BY 1;
SELECT order_id FROM df_orders WHERE amount < ANY (SELECT credit / 10000000 FROM df_accounts WHERE credit > 0) AND cust_id < 20 ORDER BY 1;
SELECT * FROM df_orders WHERE amount = (SELECT max(amount) FROM df_orders) ORDER BY order_id;
SELECT c.cust_id, x.order_id, x.amount FROM df_customers c CROSS JOIN LATERAL (SELECT order_id, amount FROM df_orders o WHERE o.cust_id = c.cust_id ORDER BY amount DESC NULLS LAST, order_id LIMIT 2) x WHERE c.cust_id < 60 ORDER BY 1, 2;
SELECT count(*) FROM df_events WHERE acct_id IN (SELECT acct_id FROM df_accounts WHERE cust_id IN (SELECT cust_id FROM df_customers WHERE tier = 2));
SELECT product_id, title FROM df_products p WHERE EXISTS (SELECT 1 FROM df_order_lines l WHERE l.product_id = p.product_id AND l.qty > 8) ORDER BY 1;
SELECT product_id FROM df_products p WHERE NOT EXISTS (SELECT 1 FROM df_order_lines l WHERE l.product_id = p.product_id AND l.qty >= 9 AND l.price > 150) ORDER BY 1;
WITH big AS MATERIALIZED (SELECT * FROM df_orders WHERE amount > 900) SELECT cust_id, count(*) FROM big GROUP BY cust_id ORDER BY cust_id;
WITH c AS (SELECT * FROM df_customers WHERE tier = 3), o AS (SELECT * FROM df_orders WHERE gift) SELECT c.cust_id, count(o.order_id) FROM c LEFT JOIN o USING (cust_id) GROUP BY c.cust_id ORDER BY 1;
SELECT (SELECT count(*) FROM df_customers), (SELECT count(*) FROM df_orders), (SELECT sum(qty) FROM df_order_lines), (SELECT count(*) FROM df_events);
SELECT cust_id, amount FROM df_orders o WHERE amount > (SELECT avg(amount) * 1.9 FROM df_orders o2 WHERE o2.cust_id = o.cust_id) ORDER BY order_id;
SELECT region_id, rname FROM df_regions r WHERE region_id IN (SELECT region_id FROM df_customers WHERE balance > 40000) ORDER BY 1;
SELECT r.rname, (SELECT count(*) FROM df_customers c WHERE c.region_id = r.region_id) FROM df_regions r ORDER BY r.region_id;
SELECT cust_id FROM df_customers WHERE (cust_id, tier) IN (SELECT cust_id, prio FROM df_orders) ORDER BY 1;
SELECT acct_id, label FROM df_accounts a WHERE EXISTS (SELECT 1 FROM df_events e WHERE e.acct_id = a.acct_id AND e.kind = '🔔') AND NOT EXISTS (SELECT 1 FROM df_events e WHERE e.acct_id = a.acct_id AND e.kind = 'error') ORDER BY 1;
WITH ranked AS (SELECT acct_id, event_id, value, rank() OVER (PARTITION BY acct_id ORDER BY value DESC NULLS LAST, event_id) r FROM df_events) SELECT acct_id, sum(value) FROM ranked WHERE r <= 3 GROUP BY acct_id ORDER BY acct_id;
SELECT x.s, count(*) FROM (SELECT cust_id, sum(qty) s FROM df_order_lines GROUP BY cust_id) x GROUP BY x.s ORDER BY x.s NULLS FIRST;
SELECT * FROM (SELECT order_id, amount FROM df_orders ORDER BY amount DESC NULLS LAST, order_id LIMIT 30) t ORDER BY order_id;
SELECT count(*) FROM (SELECT order_id FROM df_orders ORDER BY order_id OFFSET 100 LIMIT 500) t;
SELECT cust_id, (SELECT string_agg(status, '+' ORDER BY order_id) FROM df_orders o WHERE o.cust_id = c.cust_id) FROM df_customers c WHERE cust_id % 25 = 0 ORDER BY 1;

-- ===== Set operations ==========================================================================
SELECT cust_id FROM df_orders WHERE amount > 900 UNION SELECT cust_id FROM df_accounts WHERE verified ORDER BY 1;
SELECT cust_id FROM df_orders WHERE amount > 900 UNION ALL SELECT cust_id FROM df_accounts WHERE verified ORDER BY 1;
SELECT cust_id FROM df_orders INTERSECT SELECT cust_id FROM df_accounts ORDER BY 1;
SELECT cust_id FROM df_orders INTERSECT ALL SELECT cust_id FROM df_accounts ORDER BY 1;
SELECT cust_id FROM df_customers EXCEPT SELECT cust_id FROM df_orders ORDER BY 1;
SELECT cust_id FROM df_orders EXCEPT ALL SELECT cust_id FROM df_customers ORDER BY 1;
SELECT city FROM df_customers EXCEPT SELECT rname FROM df_regions ORDER BY 1;
SELECT status, count(*) FROM df_orders GROUP BY status UNION ALL SELECT 'total', count(*) FROM df_orders ORDER BY 1, 2;
SELECT product_id FROM df_products INTERSECT SELECT product_id FROM df_order_lines ORDER BY 1;
SELECT product_id FROM df_order_lines EXCEPT SELECT product_id FROM df_products ORDER BY 1 NULLS FIRST;
(SELECT order_id FROM df_orders ORDER BY amount DESC NULLS LAST, order_id LIMIT 5) UNION (SELECT order_id FROM df_orders ORDER BY amount NULLS FIRST, order_id LIMIT 5) ORDER BY 1;
SELECT count(*) FROM (SELECT cust_id FROM df_orders UNION SELECT cust_id FROM df_accounts) u;
SELECT tier FROM df_customers UNION SELECT prio FROM df_orders ORDER BY 1;
SELECT score FROM df_customers WHERE score < 0 UNION ALL SELECT small FROM df_events WHERE small < -32000 ORDER BY 1;
SELECT kind FROM df_events EXCEPT ALL SELECT status FROM df_orders ORDER BY 1;
SELECT name FROM df_customers INTERSECT SELECT label FROM df_accounts ORDER BY 1;
SELECT note FROM df_order_lines INTERSECT ALL SELECT name FROM df_customers ORDER BY 1;
-- unordered
SELECT cust_id, 'o' FROM df_orders WHERE cust_id < 30 UNION ALL SELECT cust_id, 'a' FROM df_accounts WHERE cust_id < 30;
SELECT signup FROM df_customers UNION SELECT ship_date FROM df_orders ORDER BY 1 DESC LIMIT 10;
SELECT last_seen FROM df_customers INTERSECT SELECT placed_at FROM df_orders ORDER BY 1;
SELECT balance FROM df_customers WHERE balance > 45000 UNION SELECT credit FROM df_accounts WHERE credit > 990000 ORDER BY 1;
SELECT region_id FROM df_customers EXCEPT SELECT region_id FROM df_regions ORDER BY 1;
SELECT x, count(*) FROM (SELECT tier AS x FROM df_customers UNION ALL SELECT prio FROM df_orders) u GROUP BY x ORDER BY x;

-- ===== Joins inside a family ===================================================================
SELECT c.cust_id, c.name, count(o.order_id), sum(o.amount) FROM df_customers c JOIN df_orders o ON o.cust_id = c.cust_id GROUP BY c.cust_id, c.name ORDER BY c.cust_id;
SELECT c.city, count(*), sum(l.qty * l.price) FROM df_customers c JOIN df_orders o ON o.cust_id = c.cust_id JOIN df_order_lines l ON l.cust_id = o.cust_id AND l.order_id = o.order_id GROUP BY c.city ORDER BY c.city;
SELECT c.cust_id FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id WHERE o.order_id IS NULL ORDER BY 1;
SELECT c.cust_id, o.order_id FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id WHERE o.status = 'shipped' ORDER BY 2;
SELECT c.cust_id, o.order_id FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id AND o.gift WHERE c.cust_id < 80 ORDER BY 1, 2 NULLS FIRST;
SELECT o.order_id, c.name FROM df_customers c RIGHT JOIN df_orders o ON o.cust_id = c.cust_id AND c.active WHERE o.order_id < 200 ORDER BY o.order_id;
SELECT o.order_id, o.cust_id, count(l.line_no) FROM df_orders o LEFT JOIN df_order_lines l ON l.cust_id = o.cust_id AND l.order_id = o.order_id GROUP BY o.order_id, o.cust_id HAVING count(l.line_no) = 0 ORDER BY 1;
SELECT o.status, count(*), sum(l.price) FROM df_orders o JOIN df_order_lines l USING (cust_id, order_id) GROUP BY o.status ORDER BY 1;
SELECT count(*), sum(qty) FROM df_orders NATURAL JOIN df_order_lines;
SELECT a.order_id, b.order_id FROM df_orders a JOIN df_orders b ON a.cust_id = b.cust_id AND a.order_id < b.order_id WHERE a.cust_id < 20 ORDER BY 1, 2;
SELECT c.tier, o.gift, count(*), avg(o.amount) FROM df_customers c JOIN df_orders o ON o.cust_id = c.cust_id WHERE c.active AND o.qty > 3 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT c.cust_id, o.order_id, l.line_no FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id LEFT JOIN df_order_lines l ON l.cust_id = o.cust_id AND l.order_id = o.order_id WHERE c.cust_id BETWEEN 40 AND 70 ORDER BY 1, 2 NULLS FIRST, 3 NULLS FIRST;
SELECT c.cust_id, c.name, o.order_id FROM df_customers c FULL JOIN df_orders o ON o.cust_id = c.cust_id AND o.amount > 950 WHERE c.tier = 0 ORDER BY 1, 3;
SELECT * FROM df_orders o JOIN df_order_lines l ON l.order_id = o.order_id AND l.cust_id = o.cust_id WHERE o.cust_id < 6 ORDER BY o.order_id, l.line_no;
SELECT o.order_id, max(l.price) FILTER (WHERE l.note IS NOT NULL), min(l.qty) FROM df_orders o JOIN df_order_lines l ON l.order_id = o.order_id GROUP BY o.order_id ORDER BY o.order_id LIMIT 100;
SELECT a.acct_id, count(e.event_id), sum(e.weight) FROM df_accounts a LEFT JOIN df_events e ON e.acct_id = a.acct_id GROUP BY a.acct_id ORDER BY a.acct_id;
SELECT a.acct_id FROM df_accounts a LEFT JOIN df_events e USING (acct_id) WHERE e.event_id IS NULL ORDER BY 1;
-- The sharding key IS NULL on the nullable side holds for the padded rows of every shard, not
-- for the rows of the shard a NULL key hashes to.
SELECT c.cust_id FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id WHERE o.cust_id IS NULL ORDER BY 1;
SELECT o.order_id FROM df_customers c RIGHT JOIN df_orders o ON o.cust_id = c.cust_id AND c.tier = 1 WHERE c.cust_id IS NULL ORDER BY 1;
SELECT t1.flags, t1.credit, t3.c0 FROM df_accounts t1 FULL JOIN (VALUES (7, 160.42), (9, 595.80), (2, 484.70)) AS t3(c0, c1) ON t1.flags = t3.c0 WHERE t1.acct_id IS NULL ORDER BY 3;
SELECT p.product_id, a.acct_id FROM df_products p LEFT JOIN df_accounts a ON a.acct_id = p.product_id WHERE a.acct_id IS NULL ORDER BY 1;

-- ===== Joins across families ===================================================================
SELECT c.cust_id, a.acct_id FROM df_customers c FULL JOIN df_accounts a ON a.cust_id = c.cust_id WHERE c.cust_id IS NULL OR a.acct_id IS NULL ORDER BY c.cust_id NULLS FIRST, a.acct_id NULLS FIRST;
SELECT c.cust_id, a.acct_id FROM df_customers c FULL JOIN df_accounts a ON a.cust_id = c.cust_id WHERE c.tier = 1 OR c.tier IS NULL ORDER BY 1 NULLS FIRST, 2 NULLS FIRST;
SELECT c.tier, count(e.event_id), sum(e.value) FROM df_customers c JOIN df_accounts a ON a.cust_id = c.cust_id JOIN df_events e ON e.acct_id = a.acct_id GROUP BY c.tier ORDER BY c.tier;
SELECT c.cust_id, count(DISTINCT a.acct_id), count(DISTINCT o.order_id) FROM df_customers c JOIN df_accounts a ON a.cust_id = c.cust_id JOIN df_orders o ON o.cust_id = c.cust_id GROUP BY c.cust_id ORDER BY 1;
SELECT a.acct_id, c.name FROM df_accounts a LEFT JOIN df_customers c ON c.cust_id = a.cust_id WHERE c.cust_id IS NULL ORDER BY 1;
SELECT a.acct_id, c.name FROM df_accounts a RIGHT JOIN df_customers c ON c.cust_id = a.cust_id WHERE a.verified ORDER BY 1, c.cust_id;
SELECT o.order_id, e.event_id FROM df_orders o JOIN df_events e ON e.small % 1000 = o.prio WHERE o.cust_id < 50 ORDER BY 1, 2;
SELECT o.prio, e.ok, count(*) FROM df_orders o JOIN df_events e ON e.small % 10 = o.prio WHERE o.cust_id < 100 AND e.acct_id < 1100 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT c.cust_id, sum(e.weight) FROM df_customers c LEFT JOIN df_accounts a ON a.cust_id = c.cust_id LEFT JOIN df_events e ON e.acct_id = a.acct_id WHERE c.cust_id < 50 GROUP BY c.cust_id ORDER BY 1;
SELECT a.acct_id, o.order_id FROM df_accounts a JOIN df_orders o ON o.cust_id = a.cust_id AND o.placed_at > a.opened WHERE a.acct_id < 1030 ORDER BY 1, 2;
SELECT c.city, a.verified, count(*) FROM df_customers c JOIN df_accounts a USING (cust_id) GROUP BY 1, 2 ORDER BY 1, 2;
SELECT e.kind, o.status, count(*) FROM df_events e JOIN df_accounts a ON a.acct_id = e.acct_id JOIN df_orders o ON o.cust_id = a.cust_id WHERE e.event_id < 300 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT c.cust_id, a.acct_id FROM df_customers c JOIN df_accounts a ON a.cust_id = c.cust_id WHERE c.cust_id = 101 ORDER BY 2;
SELECT a.acct_id, e.event_id, c.name FROM df_accounts a JOIN df_events e USING (acct_id) JOIN df_customers c ON c.cust_id = a.cust_id WHERE a.acct_id IN (1020, 1021, 1022, 1023) ORDER BY 2;

-- ===== Joins with the duplicated and the unsharded table =======================================
SELECT p.category, sum(l.qty), sum(l.qty * l.price) FROM df_order_lines l JOIN df_products p ON p.product_id = l.product_id GROUP BY p.category ORDER BY 1;
SELECT p.product_id, count(l.line_no) FROM df_products p LEFT JOIN df_order_lines l USING (product_id) GROUP BY p.product_id ORDER BY 1;
SELECT l.order_id, l.line_no, l.product_id FROM df_order_lines l LEFT JOIN df_products p ON p.product_id = l.product_id WHERE p.product_id IS NULL ORDER BY 1, 2;
SELECT r.rname, count(c.cust_id), sum(c.balance) FROM df_regions r LEFT JOIN df_customers c ON c.region_id = r.region_id GROUP BY r.region_id, r.rname ORDER BY r.region_id;
SELECT c.cust_id, c.region_id FROM df_customers c LEFT JOIN df_regions r ON r.region_id = c.region_id WHERE r.region_id IS NULL ORDER BY 1;
SELECT r.region_id, c.cust_id FROM df_regions r FULL JOIN df_customers c ON c.region_id = r.region_id AND c.tier = 4 WHERE r.tz > 0 OR r.region_id IS NULL ORDER BY 1 NULLS FIRST, 2 NULLS FIRST;
SELECT r.country, p.category, sum(l.qty) FROM df_regions r JOIN df_customers c ON c.region_id = r.region_id JOIN df_orders o ON o.cust_id = c.cust_id JOIN df_order_lines l ON l.cust_id = o.cust_id AND l.order_id = o.order_id JOIN df_products p ON p.product_id = l.product_id GROUP BY 1, 2 ORDER BY 1, 2;
SELECT r.region_id, p.category, count(*) FROM df_regions r CROSS JOIN df_products p WHERE r.region_id < 3 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT * FROM df_customers c JOIN df_regions r USING (region_id) WHERE c.cust_id < 30 ORDER BY c.cust_id;
SELECT p.title, l.order_id, l.line_no FROM df_products p RIGHT JOIN df_order_lines l ON l.product_id = p.product_id AND NOT p.discontinued WHERE l.cust_id < 25 ORDER BY 2, 3;
SELECT p.product_id, p.list_price, max(l.price) FROM df_products p JOIN df_order_lines l USING (product_id) GROUP BY p.product_id, p.list_price HAVING max(l.price) > p.list_price ORDER BY 1;
SELECT c.cust_id, r.rname, p.title FROM df_customers c JOIN df_regions r ON r.region_id = c.region_id JOIN df_products p ON p.product_id = c.region_id WHERE c.cust_id % 17 = 0 ORDER BY 1;
SELECT e.event_id, r.rname FROM df_events e JOIN df_regions r ON r.tz = e.small % 15 WHERE e.event_id < 200 ORDER BY 1, r.region_id;
SELECT p.category, count(DISTINCT l.cust_id), count(DISTINCT l.order_id) FROM df_products p JOIN df_order_lines l USING (product_id) GROUP BY 1 ORDER BY 1;
SELECT p.product_id, p.stock FROM df_products p WHERE p.stock > (SELECT sum(qty) FROM df_order_lines l WHERE l.product_id = p.product_id) ORDER BY 1;
SELECT c.cust_id, r.rname FROM df_customers c JOIN df_regions r USING (region_id) WHERE c.cust_id = 1;
SELECT c.cust_id, r.rname FROM df_customers c JOIN df_regions r USING (region_id) WHERE c.cust_id = 2;
SELECT c.cust_id, r.rname FROM df_customers c JOIN df_regions r USING (region_id) WHERE c.cust_id = 3;
SELECT c.cust_id, r.rname FROM df_customers c JOIN df_regions r USING (region_id) WHERE c.cust_id = 4;
SELECT c.cust_id, r.rname, p.title FROM df_customers c JOIN df_regions r USING (region_id) JOIN df_products p ON p.product_id = r.region_id WHERE c.cust_id IN (5, 6, 7, 8, 9, 10) ORDER BY 1;
SELECT r.region_id, r.rname FROM df_regions r WHERE NOT EXISTS (SELECT 1 FROM df_customers c WHERE c.region_id = r.region_id AND c.active) ORDER BY 1;

-- ===== Dates and timestamps ====================================================================
SELECT date_trunc('week', placed_at), count(*) FROM df_orders GROUP BY 1 ORDER BY 1;
SELECT extract(epoch FROM placed_at), order_id FROM df_orders ORDER BY 1 NULLS FIRST, 2 LIMIT 20;
SELECT date_part('month', signup), count(*) FROM df_customers GROUP BY 1 ORDER BY 1;
SELECT ship_date - placed_at::date AS lag_days, count(*) FROM df_orders GROUP BY 1 ORDER BY 1 LIMIT 30;
SELECT min(at), max(at), count(*) FROM df_events WHERE at >= '2024-06-01 00:00:00+00';
SELECT date_trunc('quarter', opened), count(*), sum(credit) FROM df_accounts GROUP BY 1 ORDER BY 1;
SELECT count(*) FROM df_orders WHERE placed_at BETWEEN timestamptz '2023-02-01 00:00+00' AND timestamptz '2023-02-15 00:00+00';
SELECT extract(isodow FROM at), kind, count(*) FROM df_events GROUP BY 1, 2 ORDER BY 1, 2;
SELECT sum(ship_date - placed_at::date), avg(ship_date - placed_at::date) FROM df_orders;
SELECT avg(at - timestamptz '2023-01-01 00:00:00+00'), max(at - timestamptz '2023-01-01 00:00:00+00') FROM df_events;
SELECT c.cust_id, min(o.placed_at) - c.signup FROM df_customers c JOIN df_orders o USING (cust_id) GROUP BY c.cust_id, c.signup ORDER BY 1 LIMIT 50;
SELECT to_char(placed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24'), count(*) FROM df_orders GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10;
SELECT extract(year FROM ship_date), extract(month FROM ship_date), count(*), sum(amount) FROM df_orders GROUP BY 1, 2 ORDER BY 1, 2;
SELECT date_trunc('month', last_seen) AS m, count(*) FILTER (WHERE active), count(*) FROM df_customers GROUP BY m ORDER BY m NULLS FIRST;
SELECT order_id, placed_at FROM df_orders WHERE placed_at::date = ship_date ORDER BY order_id;
SELECT justify_interval(max(placed_at) - min(placed_at)), cust_id FROM df_orders GROUP BY cust_id HAVING count(*) > 4 ORDER BY cust_id;
SELECT extract(microseconds FROM at), event_id FROM df_events WHERE extract(microseconds FROM at)::int % 1000000 <> 0 ORDER BY 2 LIMIT 20;
SELECT signup, count(*) FROM df_customers WHERE signup > date '2023-06-01' GROUP BY signup ORDER BY signup;

-- ===== Numeric, integer and boolean details ====================================================
SELECT rating, count(*) FROM df_customers GROUP BY rating ORDER BY rating;
SELECT rating::numeric(10,1), cust_id FROM df_customers ORDER BY cust_id LIMIT 40;
SELECT (SELECT sum(rating) FROM df_customers) + (SELECT sum(discount) FROM df_orders) + (SELECT sum(value) FROM df_events), (SELECT avg(rating) FROM df_customers) - (SELECT avg(discount) FROM df_orders);
SELECT tier::int8 * score, cust_id FROM df_customers ORDER BY 2 LIMIT 20;
SELECT sum(tier::int4), sum(score::int8), sum(tier::numeric), avg(tier::int8), sum(score::int2 / 10) FILTER (WHERE score < 30000) FROM df_customers;
SELECT amount::int4, amount::text, order_id FROM df_orders ORDER BY order_id DESC LIMIT 25;
SELECT round(amount, 0), trunc(amount, 1), ceil(amount), floor(amount), abs(amount), order_id FROM df_orders ORDER BY order_id LIMIT 40;
SELECT gift IS DISTINCT FROM true, count(*) FROM df_orders GROUP BY 1 ORDER BY 1;
SELECT active AND (tier > 1), count(*) FROM df_customers GROUP BY 1 ORDER BY 1 NULLS FIRST;
SELECT big % 1000, big / 1000000, acct_id FROM df_accounts ORDER BY acct_id LIMIT 30;
SELECT sum(big) FILTER (WHERE big > 0), sum(big) FILTER (WHERE big < 0), sum(big::numeric * 2) FROM df_accounts;
SELECT credit, acct_id FROM df_accounts ORDER BY credit DESC NULLS LAST, acct_id LIMIT 10;
SELECT value, event_id FROM df_events WHERE value BETWEEN -1000 AND 1000 ORDER BY value, event_id;
SELECT scale(rating), count(*) FROM df_customers GROUP BY 1 ORDER BY 1 NULLS FIRST;
SELECT count(*), sum(qty) FROM df_orders WHERE gift IS NOT TRUE;
SELECT greatest(tier, 2), least(score, 0), coalesce(balance, rating, 0), nullif(tier, 0), cust_id FROM df_customers ORDER BY cust_id LIMIT 30;
SELECT CASE WHEN amount > 500 THEN 'big' WHEN amount > 0 THEN 'small' ELSE 'other' END AS size, count(*), sum(amount) FROM df_orders GROUP BY 1 ORDER BY 1;
SELECT width_bucket(score, 0, 100000, 5), count(*) FROM df_customers GROUP BY 1 ORDER BY 1 NULLS FIRST;

-- ===== Names: qualified, quoted, aliases, whole-row references =================================
SELECT public.df_orders.order_id, df_orders.amount FROM public.df_orders WHERE public.df_orders.cust_id < 4 ORDER BY 1;
SELECT "df_orders".order_id FROM "df_orders" WHERE "df_orders".qty > 10 ORDER BY "df_orders".order_id;
SELECT df_orders.*, df_customers.name FROM df_orders JOIN df_customers USING (cust_id) WHERE df_orders.cust_id < 5 ORDER BY df_orders.order_id;
SELECT df_customers.order_id, df_customers.amount FROM df_orders df_customers WHERE df_customers.amount > 990 ORDER BY 1;
SELECT c.cust_id, count(*) FROM df_customers AS c, public.df_orders AS o WHERE c.cust_id = o.cust_id AND c.tier = 2 GROUP BY c.cust_id ORDER BY 1;
SELECT c FROM df_customers c WHERE c.cust_id < 10 ORDER BY c.cust_id;
SELECT row_to_json(o) FROM df_orders o WHERE o.cust_id < 6 ORDER BY o.order_id;
SELECT to_jsonb(l) - 'note' FROM df_order_lines l WHERE l.cust_id < 5 ORDER BY l.order_id, l.line_no;
SELECT (o).order_id, (o).amount FROM (SELECT o FROM df_orders o WHERE o.gift) s ORDER BY 1;
SELECT count(*) FROM df_orders WHERE (df_orders.*) IS NOT NULL;
SELECT "Tag", count(*) FROM df_events GROUP BY "Tag" ORDER BY "Tag" NULLS FIRST;
SELECT e."Tag", e.event_id FROM df_events e WHERE e."Tag" IS NOT NULL ORDER BY e."Tag", e.event_id LIMIT 30;
SELECT count(*) FROM df_events WHERE "Tag" = 'Ö' AND kind IS NOT NULL;
SELECT pg_typeof(amount)::text, pg_typeof(qty)::text, pg_typeof(prio)::text FROM df_orders WHERE order_id = 1 AND cust_id = (SELECT cust_id FROM df_orders WHERE order_id = 1);
SELECT order_id FROM df_orders WHERE qty > 5 AND order_id IN (SELECT order_id FROM df_order_lines WHERE qty > 5) ORDER BY 1;
SELECT c.cust_id, o.order_id FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id WHERE o.amount > 990 OR o.amount IS NULL ORDER BY 1, 2 NULLS FIRST;
SELECT c.cust_id, o.order_id FROM df_orders o RIGHT JOIN df_customers c ON o.cust_id = c.cust_id AND c.tier = 1 WHERE o.qty = 1 OR c.tier IS NULL ORDER BY 1, 2 NULLS FIRST;
SELECT o.order_id FROM df_orders o WHERE o.qty > 10 AND EXISTS (SELECT 1 FROM df_orders o2 WHERE o2.cust_id = o.cust_id AND o2.qty < 1) ORDER BY 1;

-- ===== Session settings: the combining step must take on the client's =========================
-- session: SET TimeZone = 'Asia/Kolkata'
SELECT count(*) FROM df_orders WHERE placed_at::date = date '2023-05-01';
SELECT placed_at::date, count(*) FROM df_orders GROUP BY 1 ORDER BY 1 LIMIT 20;
SELECT order_id, placed_at FROM df_orders WHERE cust_id < 10 ORDER BY order_id;
SELECT date_trunc('day', placed_at), count(*) FROM df_orders GROUP BY 1 ORDER BY 1 LIMIT 10;
SELECT count(*) FROM df_orders WHERE to_char(placed_at, 'HH24') = '03';
SELECT min(placed_at), max(last_seen) FROM df_orders JOIN df_customers USING (cust_id) WHERE extract(hour FROM placed_at) = 23;
SELECT o.order_id, o.placed_at, c.last_seen FROM df_orders o JOIN df_customers c USING (cust_id) WHERE o.placed_at::date = c.last_seen::date ORDER BY 1;
-- session: SET DateStyle = 'German, DMY'
SELECT signup, count(*) FROM df_customers WHERE signup < '05.01.2022' GROUP BY 1 ORDER BY 1;
SELECT min(last_seen), max(signup), count(*) FROM df_customers WHERE signup > '01.06.2023';
SELECT cust_id, signup, last_seen FROM df_customers WHERE cust_id < 8 ORDER BY cust_id;
-- session: SET IntervalStyle = 'sql_standard'
SELECT max(placed_at) - min(placed_at), sum(ship_date - placed_at::date) FROM df_orders;
-- session: RESET ALL
-- session: SET search_path = pg_catalog, public
SELECT count(*), sum(amount) FROM df_orders o JOIN df_customers c USING (cust_id) WHERE c.tier = 1;
SELECT r.rname, count(*) FROM df_regions r JOIN df_customers c USING (region_id) GROUP BY r.rname ORDER BY 1;
-- session: RESET ALL
-- session: SET default_transaction_read_only = on
SELECT count(*), sum(amount) FROM df_orders;
SELECT status, count(*) FROM df_orders GROUP BY status ORDER BY 1;
-- session: SET default_transaction_read_only = off
-- session: BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY
SELECT tier, count(*) FROM df_customers GROUP BY tier ORDER BY 1;
SELECT c.city, sum(o.amount) FROM df_customers c JOIN df_orders o USING (cust_id) GROUP BY 1 ORDER BY 1;
-- session: COMMIT
-- session: SET work_mem = '64kB'
SELECT cust_id, count(DISTINCT status), string_agg(status, ',' ORDER BY order_id) FROM df_orders GROUP BY cust_id ORDER BY cust_id;
-- session: SET extra_float_digits = 0
SELECT tier, cust_id, percent_rank() OVER (PARTITION BY tier ORDER BY score, cust_id) FROM df_customers ORDER BY cust_id LIMIT 50;
-- session: RESET ALL
SELECT count(*) FROM df_orders WHERE placed_at::date = date '2023-05-01';

-- ===== Relations every shard holds, on the preserved side of outer joins (issue 33) ==========
-- Each shard pads the unmatched rows with NULLs: merged, they came once per shard.
SELECT p.product_id, o.order_id FROM df_products p LEFT JOIN df_orders o ON o.order_id = p.product_id ORDER BY 1, 2 NULLS FIRST;
SELECT p.product_id, o.order_id FROM df_orders o RIGHT JOIN df_products p ON o.order_id = p.product_id * 7 ORDER BY 1, 2 NULLS FIRST;
SELECT p.product_id, l.order_id, l.line_no FROM df_products p FULL JOIN df_order_lines l ON l.product_id = p.product_id AND l.qty > 8 ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3 NULLS FIRST;
SELECT p.product_id, c.cust_id FROM df_products p LEFT JOIN df_customers c ON c.cust_id = p.product_id AND c.tier = 1 WHERE p.product_id < 30 ORDER BY 1, 2 NULLS FIRST;
SELECT v.x, c.cust_id, c.tier FROM (VALUES (1), (2), (3), (100000)) v(x) LEFT JOIN df_customers c ON c.cust_id = v.x ORDER BY 1;
SELECT g, c.name FROM generate_series(1, 6) g LEFT JOIN df_customers c ON c.cust_id = g * 3 ORDER BY 1;
SELECT x.id, c.cust_id FROM (SELECT 1 AS id) x LEFT JOIN df_customers c ON c.cust_id = x.id + 1000000 ORDER BY 1;
SELECT * FROM (SELECT 1 AS id) AS xx LEFT JOIN (df_customers AS a1 FULL JOIN (SELECT 1 AS id) AS yy ON (a1.cust_id = yy.id)) ON (xx.id = coalesce(yy.id)) ORDER BY 1;
SELECT * FROM (SELECT 1 AS id) AS xx LEFT JOIN (df_customers AS a1 FULL JOIN (SELECT 1 AS id) AS yy ON (a1.tier = yy.id)) ON (xx.id = coalesce(yy.id)) ORDER BY a1.cust_id NULLS FIRST;
SELECT p.product_id, ss.v, c.cust_id FROM df_products p LEFT JOIN LATERAL (SELECT p.product_id + 1 AS v) ss ON true LEFT JOIN df_customers c ON c.cust_id = ss.v WHERE p.product_id IN (3, 5, 59, 60) ORDER BY 1;
WITH d AS (SELECT product_id FROM df_products WHERE category IS NOT NULL) SELECT d.product_id, count(l.line_no) FROM d LEFT JOIN df_order_lines l USING (product_id) GROUP BY 1 ORDER BY 1;
SELECT count(*), count(o.order_id) FROM df_products p LEFT JOIN df_orders o ON o.order_id = p.product_id;
SELECT p.category, count(*) FROM df_products p LEFT JOIN df_order_lines l ON l.product_id = p.product_id AND l.qty = 1 GROUP BY 1 ORDER BY 1 NULLS FIRST;
SELECT DISTINCT o.cust_id FROM df_products p LEFT JOIN df_orders o ON o.order_id = p.product_id ORDER BY 1 NULLS FIRST;
SELECT p.product_id, o.order_id FROM df_products p LEFT JOIN df_orders o ON o.order_id = p.product_id ORDER BY 1 LIMIT 7;
SELECT p.product_id, o.order_id FROM df_products p LEFT JOIN df_orders o ON o.order_id = p.product_id WHERE o.cust_id = 5 ORDER BY 1;
SELECT p.product_id, o.order_id, row_number() OVER (ORDER BY p.product_id) FROM df_products p LEFT JOIN df_orders o ON o.order_id = p.product_id ORDER BY 1;
-- A group key read from the nullable side is NULL in every shard's padded rows.
SELECT o.cust_id, count(*) FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id AND o.qty > 9 GROUP BY o.cust_id ORDER BY 1 NULLS FIRST;
SELECT DISTINCT o.cust_id FROM df_customers c LEFT JOIN df_orders o ON o.cust_id = c.cust_id AND o.qty > 9 ORDER BY 1 NULLS FIRST;
SELECT o.cust_id, count(*) FROM df_orders o RIGHT JOIN df_customers c ON o.cust_id = c.cust_id AND o.gift GROUP BY 1 ORDER BY 1 NULLS FIRST;
-- Replicated relations meeting sharded ones elsewhere (issue 33, item 2).
SELECT p.product_id, (SELECT count(*) FROM df_order_lines l WHERE l.product_id = p.product_id) FROM df_products p ORDER BY 1;
SELECT p.product_id, (SELECT max(l.price) FROM df_order_lines l WHERE l.product_id = p.product_id AND l.qty > 5) FROM df_products p WHERE p.product_id < 20 ORDER BY 1;
SELECT c.cust_id FROM df_customers c WHERE c.tier = 1 OR EXISTS (SELECT 1 FROM df_orders o WHERE o.cust_id = c.cust_id AND o.qty > 9) ORDER BY 1;
SELECT p.product_id FROM df_products p WHERE p.stock < 0 OR p.product_id IN (SELECT l.product_id FROM df_order_lines l WHERE l.qty = 2) ORDER BY 1;
SELECT p.product_id FROM df_products p WHERE NOT EXISTS (SELECT 1 FROM df_order_lines l WHERE l.product_id = p.product_id) OR p.product_id = 1 ORDER BY 1;
SELECT * FROM (SELECT cust_id, name FROM df_customers ORDER BY cust_id LIMIT 5) s ORDER BY 1;
SELECT p.product_id FROM df_products p WHERE p.product_id IN (SELECT product_id FROM df_order_lines WHERE product_id IS NOT NULL ORDER BY price DESC NULLS LAST, cust_id, order_id, line_no LIMIT 3) ORDER BY 1;
SELECT c.cust_id, t.order_id FROM df_customers c JOIN (SELECT cust_id, order_id FROM df_orders ORDER BY order_id LIMIT 10) t ON t.cust_id = c.cust_id ORDER BY 2;
SELECT p.product_id, t.order_id FROM df_products p JOIN (SELECT product_id, order_id FROM df_order_lines ORDER BY order_id, line_no LIMIT 10) t ON t.product_id = p.product_id ORDER BY 2, 1;
SELECT DISTINCT ON (o.cust_id) o.cust_id, o.order_id, p.title FROM df_orders o JOIN df_order_lines l ON l.cust_id = o.cust_id AND l.order_id = o.order_id JOIN df_products p ON p.product_id = l.product_id ORDER BY o.cust_id, o.order_id, l.line_no;
SELECT DISTINCT ON (p.category) p.category, l.order_id FROM df_products p JOIN df_order_lines l ON l.product_id = p.product_id ORDER BY p.category NULLS FIRST, l.order_id, l.line_no;
SELECT p.category, c.tier, count(*) FROM df_products p JOIN df_order_lines l ON l.product_id = p.product_id JOIN df_customers c ON c.cust_id = l.cust_id GROUP BY GROUPING SETS ((p.category), (c.tier), ()) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3;
SELECT p.category, p.discontinued, sum(l.qty) FROM df_products p JOIN df_order_lines l ON l.product_id = p.product_id GROUP BY ROLLUP (p.category, p.discontinued) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3;
SELECT c.tier, o.gift, count(*) FROM df_customers c JOIN df_orders o USING (cust_id) GROUP BY CUBE (c.tier, o.gift) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3;
WITH RECURSIVE chain(cust_id, depth) AS (SELECT cust_id, 0 FROM df_customers WHERE cust_id = 1 UNION ALL SELECT c.cust_id, chain.depth + 1 FROM chain JOIN df_customers c ON c.cust_id = chain.cust_id + 1 WHERE chain.depth < 6) SELECT * FROM chain ORDER BY 1;
WITH RECURSIVE up(n) AS (SELECT min(cust_id) FROM df_customers UNION ALL SELECT n + 1 FROM up WHERE n < 5) SELECT up.n, c.name FROM up LEFT JOIN df_customers c ON c.cust_id = up.n ORDER BY 1;
VALUES (0::bigint, 'none'::text) UNION ALL SELECT cust_id, name FROM df_customers WHERE cust_id < 4 ORDER BY 1;

-- ===== WITH queries named like recorded tables; TABLE t (issue 33, item 5) ==================
-- A name means the WITH query inside its scope, the table outside it.
WITH df_orders AS (SELECT 1 AS x) SELECT count(*) FROM df_orders, df_customers;
WITH RECURSIVE df_customers(a) AS (SELECT 1 UNION ALL SELECT a + 1 FROM df_customers WHERE a < 3) SELECT * FROM df_customers ORDER BY 1;
WITH RECURSIVE x(a) AS (SELECT 1 UNION ALL SELECT a + 1 FROM x WHERE a < 4) SELECT x.a, c.name FROM x JOIN df_customers c ON c.cust_id = x.a ORDER BY 1;
SELECT c.cust_id, (WITH df_orders AS (SELECT 5 AS n) SELECT n FROM df_orders) FROM df_customers c WHERE c.cust_id < 5 ORDER BY 1;
WITH df_products AS (SELECT cust_id FROM df_customers WHERE tier = 2) SELECT count(*) FROM df_products;
WITH a AS (SELECT 1 AS v), df_orders AS (SELECT v + 1 AS v FROM a) SELECT * FROM df_orders;
VALUES (0::bigint, 0::bigint, 'none', NULL::date, 0::numeric, 0, true, 0::int8) UNION ALL TABLE df_accounts ORDER BY 1;
SELECT count(*), sum(qty) FROM (TABLE df_orders) t;
TABLE df_customers ORDER BY cust_id LIMIT 3;
(TABLE df_products) EXCEPT SELECT * FROM df_products WHERE product_id > 3 ORDER BY 1;

-- ===== Found by the random-query tester (tests/qfuzz.rs) ======================================
SELECT count(DISTINCT kind), count(*), count(kind) FROM df_events WHERE false;
SELECT count(DISTINCT status), count(*) FROM df_orders WHERE order_id < 0 GROUP BY cust_id ORDER BY 1;
SELECT ((SELECT count(*) FROM df_regions) = 12) IS TRUE FROM df_products LIMIT 1;
SELECT p.product_id, r.rname FROM df_products p JOIN df_regions r ON r.region_id = p.product_id ORDER BY 1;
SELECT DISTINCT NULLIF(qty, 1) FROM df_orders ORDER BY 1;
SELECT NULLIF(qty, 1), count(*) FROM df_orders GROUP BY 1 ORDER BY 1;
SELECT DISTINCT CASE WHEN qty > 3 THEN 1 ELSE qty END FROM df_orders ORDER BY 1;
SELECT DISTINCT (CASE WHEN qty > 3 THEN 1 ELSE qty END)::numeric FROM df_orders ORDER BY 1;
SELECT DISTINCT CASE WHEN qty > 3 THEN 1 END FROM df_orders ORDER BY 1;
SELECT DISTINCT (DATE '2022-08-29')::text FROM df_orders;
SELECT DISTINCT (SELECT 1 AS one), EXISTS (SELECT 1), ARRAY[1], (SELECT max(p.product_id) FROM df_products p), current_date - current_date FROM df_orders;
SELECT DISTINCT qty::text::int, 'x'::text, status COLLATE "C" FROM df_orders ORDER BY 1, 3;

-- ===== Expected refusals =======================================================================
-- refused: FOR UPDATE over a join across families
SELECT c.cust_id FROM df_customers c JOIN df_accounts a USING (cust_id) FOR UPDATE;
-- refused: a table named like a WITH query, outside the WITH query's scope
SELECT count(*) FROM df_orders o, (WITH df_orders AS (SELECT 1 AS x) SELECT x FROM df_orders) s;
