"""The client's connection layer: a connection to one broker (:mod:`.connection`), the
pool that shares them (:mod:`.pool`), topic lookups (:mod:`.lookup`), the handle base
that keeps a producer or consumer attached across reconnects (:mod:`.handler`), and
authentication (:mod:`.auth`). Nothing here knows producers or consumers."""
