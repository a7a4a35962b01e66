-- dbanon.lca(), as revision 0001 installed it (and 0009's downgrade restores it).
CREATE OR REPLACE FUNCTION dbanon.lca(hierarchy text, vals text[])
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT min(m.label)
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = ANY (vals)
    GROUP BY m.level
    HAVING count(DISTINCT m.label) = 1
       AND count(DISTINCT m.value) = (SELECT count(DISTINCT v) FROM unnest(vals) v)
    ORDER BY m.level
    LIMIT 1
$$;

COMMENT ON FUNCTION dbanon.lca(text, text[]) IS
    'Label of the lowest common ancestor of a set of leaf values; NULL if one is not a leaf.';
