-- A survivor releases the rows that the retry job of replica $1 held, once that replica
-- departed (its liveness lapsed and its wheel-stage holdings were taken over, or it
-- left): each pending one gets claimed_by 'lapsed:<replica>', so that none of its claims
-- can confirm or settle it any more, and a lease that ends now, or, when its claim
-- confirmed a request within the guard $2, when the guard ends (that request may still
-- start until then; later its replica's fence stops it): the next ClaimDue of any replica
-- takes it. Rows no longer pending (settled meanwhile, or discarded by an operator during
-- a send) only forget the replica. Returns, for each row, whether it was released.
-- $1 replica, $2 guard (interval)
UPDATE failed_sends
SET claimed_by = CASE WHEN status = 'pending' THEN 'lapsed:' || $1 ELSE claimed_by END,
    lease_until = CASE WHEN status = 'pending'
                       THEN GREATEST(now(), confirmed_at + $2::interval) ELSE lease_until END,
    claimed_replica = NULL,
    updated_at = now()
WHERE claimed_replica = $1
RETURNING status = 'pending' AS released
