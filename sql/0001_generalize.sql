-- dbanon.generalize(): a leaf's label at a level. Installed by revision 0001, dropped by 0006
-- (whose downgrade installs it again from this file).
CREATE FUNCTION dbanon.generalize(hierarchy text, val text, lvl integer)
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT m.label
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = val AND m.level = lvl
$$;

COMMENT ON FUNCTION dbanon.generalize(text, text, integer) IS
    'Label of a leaf value at a hierarchy level (0 = the value itself); NULL when not a leaf.';
