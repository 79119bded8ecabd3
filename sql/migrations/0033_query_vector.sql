-- 0033_query_vector: the query vector has one name in every function that ranks by it,
-- query_vector, beside query_text: facts_search, messages_recall, context_read and
-- store_items_search called it "query". A parameter's name cannot change in place, so the old
-- signatures are dropped here (by name: each has one) and the API refresh of the same migrate
-- creates the new ones. Applied once under the migration lock; between this migration and the
-- API refresh (a few hundred milliseconds) a call of these four fails with 42883.
DROP FUNCTION IF EXISTS pymem.facts_search;
DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.context_read;
DROP FUNCTION IF EXISTS pymem.store_items_search;
