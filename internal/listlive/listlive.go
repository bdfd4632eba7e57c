// Package listlive is the one SQL condition that says whether a bulk list is still its
// account's: package list takes it for every list route, and the packages that show what refers
// to a list (the webhook delivery log, the account export) take it too, which package list,
// importing them, cannot lend them. It imports nothing, so that any package may.
package listlive

// Live is the SQL condition, on the lists row named alias, that keeps the lists whose retention
// has not passed: one past its expires_at is gone for its account at once, on every route and in
// the account's export, whether or not a verifier's sweep (list.Purge) has deleted its rows yet
// (docs/lists.md, "States"). The clock is Postgres's, which set expires_at. Every query that
// answers an account about its lists, or about what belongs to one, takes this one condition, so
// that none of them shows a list the others call gone.
func Live(alias string) string {
	return "(" + alias + ".expires_at IS NULL OR " + alias + ".expires_at > now())"
}

// OfLive is the SQL condition that keeps a row whose listID column (a nullable lists id, such as
// a delivery's list_id) names no list or a Live one: a list's callback delivery is gone with the
// list.
func OfLive(listID string) string {
	return "(" + listID + " IS NULL OR EXISTS (SELECT 1 FROM lists live_list WHERE live_list.id = " + listID +
		" AND " + Live("live_list") + "))"
}
