"""The debugger's features on stored runs: rerun and replay with recorded answers
(`rerun`, `replay`), fork from a round and splice (`fork`), run files for regression
fixtures (`run_files`), compare two runs (`compare`), re-execute one call
(`reexecution`, `reexecution_reads`), approvals and breakpoints (`approvals`,
`breakpoints`), try-it runs of one tool (`tryit`), what the timeline shows of a run
(`timeline`, `run_header`; renderings of it reused while their inputs are equal,
`kept_renderings`) and how a run was made from another (`lineage`)."""
