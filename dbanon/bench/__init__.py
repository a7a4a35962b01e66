"""Benchmarks: the papers' timings (methods), the scale bench against the physical floor
(scale), refresh soaks (soak), the swap's reader waits (swap), the full-domain search
(fulldomain), their registry for `dbanon bench` (registry), the command builder shared with
the experiments (runners) and a child's own peak RSS (peak). Their figures go to committed
JSON under docs/.

May import anything below the CLI; nothing in the lifecycle, methods or models imports it."""
