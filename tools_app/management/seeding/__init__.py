"""What `manage.py seed_audit` writes: the demo world the runs point at, marked so
`--clear` removes it (`demo_data`); the runs, rounds and calls, varied as real use is
(`rows`); and the fast bulk write of them (`bulk_write`)."""
