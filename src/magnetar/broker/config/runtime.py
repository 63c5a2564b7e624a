"""The process itself: event-loop polling, the lag probe and stall tracer, the GC freezer,
logging and the ready file.

Each field's help text is what ``magnetar serve --help`` prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.config.errors import setting_help as _help


@dataclass
class RuntimeSettings:
    idle_poll_us: int = field(
        default=200,
        metadata=_help(
            "microseconds the event loop keeps polling after input before it sleeps, "
            "at most: lower latency where waking a CPU is slow; the span halves (to an "
            "eighth) after each polling period that found no input and doubles back "
            "while polling keeps finding it; 0 disables (an in-process EmbeddedBroker "
            "uses 0)"
        ),
    )
    loop_lag_probe_interval: float = field(
        default=0.01,
        metadata=_help(
            "seconds between wake-ups of the event loop lag probe, which reports how "
            "late they come (magnetar_event_loop_lag_seconds_max and stalls over 50 ms "
            "on /metrics); 0 disables"
        ),
    )
    loop_stall_trace_seconds: float = field(
        default=0.0,
        metadata=_help(
            "when the event loop has not ticked for this many seconds, log the stack of "
            "what it is running (a diagnostic; needs the lag probe on); 0 disables"
        ),
    )
    gc_freeze_after_pause: float = field(
        default=0.02,
        metadata=_help(
            "magnetar serve only: after a full cyclic garbage collection longer than this "
            "many seconds, what survived it is frozen out of the collector (gc.freeze), so "
            "later full collections stay short however many topics and connections are "
            "loaded (cyclic garbage among frozen objects waits for a freeze ten minutes "
            "after the last such reclaim, which collects everything once); 0 disables"
        ),
    )
    log_level: str = field(
        default="INFO", metadata=_help("DEBUG, INFO, WARNING, ERROR or CRITICAL")
    )
    log_format: str = field(default="json", metadata=_help("'json' or 'text'"))
    ready_file: str | None = field(
        default=None,
        metadata=_help(
            "a JSON file `magnetar serve` writes once it serves (its pid and the URLs it "
            "listens on) and removes when it stops; `magnetar healthcheck` reads it"
        ),
    )
