"""Executing one run in a worker: claim it and drive the engine (`runner`), record the
engine's events (`recorder`, written in groups by `batch_writer`), answer the engine's
approval and breakpoint questions from what is stored (`approver`, `breakpoint_hooks`),
and the other work a worker does: a person's re-execution of one call (`reexecute`) and
an endpoint's capability probe (`probing`)."""
