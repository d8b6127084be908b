-- A cancel of the RD_ID $1 locks its rows first and reads them as they are once locked:
-- a confirm of the retry job (failed_confirm.sql) that committed first is seen, and one
-- that comes later waits for the cancel's commit and then finds the row cancelled.
-- failed_cancel.sql runs next, in the same transaction. Oldest first.
-- sending: a retry-job claim confirmed a request of the row that may be in flight: the
-- claim has not settled it (a pending row), or an operator discarded the row during the
-- request and the lease of that confirm is still running.
-- $1 RD_ID
SELECT id, status,
       claimed_by IS NOT NULL AND confirmed_at IS NOT NULL
           AND (status = 'pending' OR lease_until > now()) AS sending
FROM failed_sends
WHERE message_id = $1
ORDER BY id
FOR UPDATE
