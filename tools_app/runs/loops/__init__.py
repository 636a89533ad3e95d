"""Where runs execute in a process: the embedded task backend and its event loop
(`task_backend`), the database lanes that loop's runs write through, groups of work
handed in together (`loop_groups`), the database task backend woken by LISTEN/NOTIFY
(`task_wakeup`), each loop's provider HTTP clients (`provider_clients`) and what a
long-running process prepares at start (`process`)."""
