-- When the oldest pending row was first recorded (NULL when nothing is pending).
SELECT min(created_at) FROM failed_sends WHERE status = 'pending'
