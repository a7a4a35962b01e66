-- dbanon.k_anonymity(): the k-anonymity audit as an SQL function, for DBAs who check relations
-- from psql or their own jobs; classes are the GROUP BY over the QIs, quoted with format('%I').
-- Installed by revision 0001; the live definition.
CREATE FUNCTION dbanon.k_anonymity(rel regclass, qi text[], k integer,
    OUT holds boolean, OUT classes bigint, OUT min_class_size bigint,
    OUT rows_in_small_classes bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    cols text;
BEGIN
    IF k < 1 THEN
        RAISE EXCEPTION 'k must be at least 1, got %', k;
    END IF;
    SELECT string_agg(format('%I', c), ', ') INTO cols FROM unnest(qi) c;
    EXECUTE format(
        'SELECT count(*), min(n), coalesce(sum(n) FILTER (WHERE n < $1), 0)
         FROM (SELECT count(*) AS n FROM %s GROUP BY %s) classes', rel, cols)
    INTO classes, min_class_size, rows_in_small_classes USING k;
    holds := coalesce(min_class_size >= k, true);
END
$$;

COMMENT ON FUNCTION dbanon.k_anonymity(regclass, text[], integer) IS
    'Equivalence classes of rel over the columns qi, and whether each has at least k rows.';
