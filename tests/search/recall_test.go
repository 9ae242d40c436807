package search

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

// pairs are (query, expected tool) over the recorded tools: how a person or
// a model asks for a tool, in their words, not the tool's. They were written
// from the task, before the ranking was measured; a pair is never reworded
// to make it pass.
var pairs = []struct{ query, want string }{
	{"echo back a message", "everything__echo"},
	{"repeat the text I send", "everything__echo"},
	{"add two numbers", "everything__get-sum"},
	{"sum of a and b", "everything__get-sum"},
	{"calculate the total of two values", "everything__get-sum"},
	{"show environment variables", "everything__get-env"},
	{"debug the server configuration env", "everything__get-env"},
	{"get a small image", "everything__get-tiny-image"},
	{"return the MCP logo picture", "everything__get-tiny-image"},
	{"message with annotations", "everything__get-annotated-message"},
	{"annotated content metadata example", "everything__get-annotated-message"},
	{"links to resources", "everything__get-resource-links"},
	{"resource reference by id", "everything__get-resource-reference"},
	{"list the client's roots", "everything__get-roots-list"},
	{"structured output with a schema", "everything__get-structured-content"},
	{"weather for a location as structured content", "everything__get-structured-content"},
	{"compress a file with gzip", "everything__gzip-file-as-resource"},
	{"zip up data and return it as a resource", "everything__gzip-file-as-resource"},
	{"deep research on a topic", "everything__simulate-research-query"},
	{"gather and analyze information about a subject", "everything__simulate-research-query"},
	{"turn logging on or off", "everything__toggle-simulated-logging"},
	{"enable random log messages", "everything__toggle-simulated-logging"},
	{"subscription updates on or off", "everything__toggle-subscriber-updates"},
	{"ask the user for input", "everything__trigger-elicitation-request"},
	{"elicit information from the user", "everything__trigger-elicitation-request"},
	{"long running task with progress", "everything__trigger-long-running-operation"},
	{"operation that takes a while and reports steps", "everything__trigger-long-running-operation"},
	{"ask the LLM to sample a completion", "everything__trigger-sampling-request"},
	{"request sampling with a prompt and max tokens", "everything__trigger-sampling-request"},
	{"make a new folder", "filesystem__create_directory"},
	{"create nested directories", "filesystem__create_directory"},
	{"mkdir", "filesystem__create_directory"},
	{"tree view of a folder recursively", "filesystem__directory_tree"},
	{"recursive listing as JSON", "filesystem__directory_tree"},
	{"edit lines in a text file", "filesystem__edit_file"},
	{"apply changes and show a diff", "filesystem__edit_file"},
	{"replace text in a file, dry run first", "filesystem__edit_file"},
	{"file size and modification time", "filesystem__get_file_info"},
	{"metadata and permissions of a file", "filesystem__get_file_info"},
	{"which directories may I access", "filesystem__list_allowed_directories"},
	{"allowed folders of this server", "filesystem__list_allowed_directories"},
	{"list files in a folder", "filesystem__list_directory"},
	{"show the contents of a directory", "filesystem__list_directory"},
	{"directory listing sorted by size", "filesystem__list_directory_with_sizes"},
	{"how big are the files in this directory", "filesystem__list_directory_with_sizes"},
	{"rename a file", "filesystem__move_file"},
	{"move a file to another directory", "filesystem__move_file"},
	{"read an image file as base64", "filesystem__read_media_file"},
	{"open an audio file", "filesystem__read_media_file"},
	{"read several files at once", "filesystem__read_multiple_files"},
	{"read the contents of many files to compare them", "filesystem__read_multiple_files"},
	{"read a text file", "filesystem__read_text_file"},
	{"read file", "filesystem__read_file"},
	{"show the first lines of a file", "filesystem__read_text_file"},
	{"find files matching a glob pattern", "filesystem__search_files"},
	{"search for files by name recursively", "filesystem__search_files"},
	{"write content to a file", "filesystem__write_file"},
	{"overwrite an existing file", "filesystem__write_file"},
	{"save text into a new file", "filesystem__write_file"},
}

// recallAt5 is the share of pairs whose expected tool is among the top 5;
// top1 the share where it comes first.
func recallAt5(x *toolsearch.Index) (r, top1 float64, misses []string) {
	hit, first := 0, 0
	for _, p := range pairs {
		found := x.Search(p.query, 5, nil)
		ok := false
		var got []string
		if len(found) > 0 && found[0].Tool.Name == p.want {
			first++
		}
		for _, h := range found {
			got = append(got, h.Tool.Name)
			ok = ok || h.Tool.Name == p.want
		}
		if ok {
			hit++
		} else {
			misses = append(misses, fmt.Sprintf("%q: want %s, got %s", p.query, p.want, strings.Join(got, " ")))
		}
	}
	return float64(hit) / float64(len(pairs)), float64(first) / float64(len(pairs)), misses
}

// TestRecallAt5 is the figure docs/benchmarks.md reports: recall@5 of the
// pairs over the recorded tools of the pinned npm servers, at least 0.9.
func TestRecallAt5(t *testing.T) {
	if len(pairs) < 50 {
		t.Fatalf("only %d pairs; the measure asks for at least 50", len(pairs))
	}
	rec := loadFixture(t)
	x := toolsearch.New()
	known := map[string]bool{}
	for srv, tools := range rec.Servers {
		x.Replace(srv, tools)
		for _, tool := range tools {
			known[tool.Name] = true
		}
	}
	covered := map[string]bool{}
	for _, p := range pairs {
		if !known[p.want] {
			t.Fatalf("pair %q expects %s, which the servers do not have", p.query, p.want)
		}
		covered[p.want] = true
	}
	var uncovered []string
	for name := range known {
		if !covered[name] {
			uncovered = append(uncovered, name)
		}
	}
	sort.Strings(uncovered)
	if len(uncovered) > 0 {
		t.Errorf("tools no pair asks for: %v", uncovered)
	}
	r, top1, misses := recallAt5(x)
	t.Logf("recall@5 = %.3f (top-1 %.3f) over %d pairs, %d tools (%d misses)", r, top1, len(pairs), x.Len(), len(misses))
	for _, m := range misses {
		t.Logf("miss: %s", m)
	}
	if r < 0.9 {
		t.Fatalf("recall@5 %.3f is below 0.9", r)
	}
}
