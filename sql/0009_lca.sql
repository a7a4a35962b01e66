-- dbanon.lca() reading only current hierarchy versions: installed by revision 0009; the live
-- definition.
CREATE OR REPLACE FUNCTION dbanon.lca(hierarchy text, vals text[])
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT min(m.label)
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = ANY (vals) AND h.retired_at IS NULL
    GROUP BY m.level
    HAVING count(DISTINCT m.label) = 1
       AND count(DISTINCT m.value) = (SELECT count(DISTINCT v) FROM unnest(vals) v)
    ORDER BY m.level
    LIMIT 1
$$;
