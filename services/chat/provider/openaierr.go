package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// headerDoer is the caller's HTTP client for one attempt, keeping the
// response's headers: go-openai's errors carry the status but not
// Retry-After / Retry-After-Ms, which retry.go honours.
type headerDoer struct {
	client *http.Client
	sent   bool        // a request went out
	header http.Header // of the response, when one came
}

func (d *headerDoer) Do(req *http.Request) (*http.Response, error) {
	d.sent = true
	resp, err := d.client.Do(req)
	if resp != nil {
		d.header = resp.Header
	}
	return resp, err
}

// openaiStatus maps a go-openai error to the HTTP error it reports (the
// caller adds the headers).
func openaiStatus(err error) (httpError, bool) {
	// First: a RequestError (an error answer whose body is not the API's
	// error JSON) may wrap an APIError without status.
	var re *openai.RequestError
	if errors.As(err, &re) {
		// Quoted whole here: retry redacts the API key, then cuts it
		// (clipMessage). Cut first, a key echoed across the cut kept its
		// first part.
		body := strings.TrimSpace(string(re.Body))
		return httpError{status: re.HTTPStatusCode, message: body, contextFull: contextExceeded(re.HTTPStatusCode, "", body)}, true
	}
	var ae *openai.APIError
	if !errors.As(err, &ae) {
		return httpError{}, false
	}
	if ae.HTTPStatusCode == 0 {
		// An error event inside a 200 stream: {"error":{"type","code","message"}}.
		he := httpError{status: http.StatusInternalServerError, message: ae.Message}
		if strings.Contains(ae.Type+fmt.Sprint(ae.Code), "rate_limit") {
			he.status = http.StatusTooManyRequests
		}
		return he, true
	}
	return httpError{status: ae.HTTPStatusCode, message: ae.Message, quota: ae.Type == insufficientQuota || fmt.Sprint(ae.Code) == insufficientQuota,
		contextFull: contextExceeded(ae.HTTPStatusCode, fmt.Sprint(ae.Code), ae.Message)}, true
}

// insufficientQuota is OpenAI's error type and code of a spent quota.
const insufficientQuota = "insufficient_quota"
