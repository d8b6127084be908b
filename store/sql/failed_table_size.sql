-- The bytes failed_sends takes on disk: its heap, indexes and TOAST (the payloads).
SELECT pg_total_relation_size('failed_sends')
