-- Generalisation over the hierarchies stored in the catalog (dbanon.hierarchy_map holds, for each
-- leaf value, its label at every level). Hierarchies are balanced, so the lowest common ancestor of
-- a set of leaves is the label at the lowest level where all of them agree.
-- This file is what migration 0001 installs; 0005 drops dbanon.generalize() again (unused).

CREATE FUNCTION dbanon.generalize(hierarchy text, val text, lvl integer)
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT m.label
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = val AND m.level = lvl
$$;

COMMENT ON FUNCTION dbanon.generalize(text, text, integer) IS
    'Label of a leaf value at a hierarchy level (0 = the value itself); NULL when not a leaf.';

CREATE FUNCTION dbanon.lca(hierarchy text, vals text[])
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
