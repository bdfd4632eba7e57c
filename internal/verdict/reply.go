package verdict

// SMTPReply is the mail server's reply a verdict was decided on: the result's smtp_reply field
// (docs/api.md, "The verify result"). It is evidence a customer can show when a verdict is
// disputed, so it is the server's own words, only made safe to store and show.
type SMTPReply struct {
	Code int `json:"code"`
	// EnhancedCode is the RFC 3463 status code the reply began with, like "5.1.1"; nil when it
	// had none.
	EnhancedCode *string `json:"enhanced_code"`
	// Text is the reply's first line after the codes: valid UTF-8 without control or
	// bidirectional-control characters, at most MaxReplyText bytes.
	Text string `json:"text"`
}

// MaxReplyText bounds smtp_reply.text in bytes. Real servers' first lines are shorter; a longer
// one is cut on a character boundary.
const MaxReplyText = 200
