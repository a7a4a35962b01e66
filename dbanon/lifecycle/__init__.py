"""The lifecycle of a release: resolve a spec, build it through a method, verify it, measure it
against the earlier releases, swap it in, record the run; refresh, schedule, grant, drop; the
spec file (releases as code). It names no method.

Owns: publish, refresh, resolve, verify, swap, releases (report, drop), catalogue (a release's
catalog row), counts, runs (the run lock and trail),
schedule, grants, specfile, hierarchy_pins, identifying (the --keep gate), interrupts,
uninstall, evaluate, declare (a spec from publish options), aside (work over a run's snapshot on
a second backend while the run goes on).
The intersection guard's map and measure are set logic (dbanon.setlogic.composition), which
the methods that keep groups read too.
May import: dbanon.errors, dbanon.core, dbanon.db, dbanon.models, dbanon.metrics,
dbanon.algorithms, dbanon.setlogic, dbanon.methods. Never the CLI, benches, experiments or the
docs generator."""
