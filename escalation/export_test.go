package escalation

// SignMark is the signature signer makes of a step's mark (its id, target and mark), as
// Carry makes it: for tests of marks signed with another key.
func SignMark(signer *Signer, id, target, mark string) string {
	return signer.sign(purposeMark, markPayload(id, target, mark))
}
