package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// chatSize is one request shape of the proxy scenario. body(n) is the n-th
// request's JSON: every request's system prompt names its own ticket
// number, so no two requests share a rendered prefix and the gateway's
// count cache cannot answer one from another: each is counted in full.
type chatSize struct {
	name string
	body func(model string, n int64) []byte
}

// chatMessage is an OpenAI chat message.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	MaxTokens int           `json:"max_tokens"`
}

// longTurns is a ten-turn support conversation (five user turns, five
// assistant answers) about 1,000 tokens long with the system prompt, in
// the qwen3 tokenizer. Varied prose, numbers, code and punctuation, so
// that the pre-tokenizer and BPE do the work they do on real traffic.
var longTurns = []chatMessage{
	{"user", "Hi, we run a small logistics company and our nightly export job started failing last Tuesday. " +
		"It reads about 40,000 shipment rows from PostgreSQL 15, converts them to CSV and uploads the file to an S3 bucket " +
		"before 06:00. Since Tuesday it dies after roughly 25 minutes with \"connection reset by peer\". Where should I start looking?"},
	{"assistant", "A reset after a fairly constant duration usually points at something between the job and the database " +
		"rather than at the query itself. Three likely suspects: an idle or statement timeout on a proxy such as PgBouncer, " +
		"a load balancer that drops connections after a fixed time, or the database restarting for maintenance. " +
		"Does the job connect directly or through a pooler?"},
	{"user", "It goes through PgBouncer in transaction mode. The Postgres log shows nothing at 02:25, but the PgBouncer log has " +
		"lines like `closing because: query_timeout (age=1500s)`. Someone on the platform team lowered query_timeout from 3600 to 1500 " +
		"last week to stop runaway analytics queries. So that's probably it? Our export query is one big SELECT with three JOINs and " +
		"an ORDER BY on created_at."},
	{"assistant", "That matches exactly: 1,500 seconds is 25 minutes. You have two options. The quick one is to give the export " +
		"its own PgBouncer database entry, or its own user, with a longer query_timeout, so the analytics limit stays in place. " +
		"The better one is to make the export stream in pages: select by created_at ranges (say one day at a time) with an index on " +
		"created_at, write each page to the CSV, and commit between pages. Each query then finishes in seconds."},
	{"user", "Paging sounds right. Would keyset pagination work here? Something like WHERE (created_at, id) > ($1, $2) ORDER BY " +
		"created_at, id LIMIT 5000. I'm worried about rows inserted while the export is running, because drivers keep scanning " +
		"packages until about 03:00 and those rows get created_at values in the past when they sync late from offline handhelds."},
	{"assistant", "Keyset pagination is the right shape, and (created_at, id) is a good key as long as you have a composite index " +
		"on both columns. Late rows are the real problem: a row that arrives at 02:40 with created_at = 01:10 lands behind your cursor " +
		"and is skipped. Either export from a snapshot (open one REPEATABLE READ transaction, which PgBouncer transaction mode allows " +
		"if the whole export is one transaction, though that brings back the timeout), or key the export on an ingestion column such " +
		"as inserted_at set by a DEFAULT now(), which only grows."},
	{"user", "We do have an inserted_at column with DEFAULT now(), added in 2023 for auditing. It isn't indexed though, and the " +
		"table is around 90 GB with 310 million rows. Would CREATE INDEX CONCURRENTLY on a table that size lock anything " +
		"important? Last time someone built an index during business hours the dispatch dashboard froze."},
	{"assistant", "CREATE INDEX CONCURRENTLY takes only a SHARE UPDATE EXCLUSIVE lock, so inserts, updates and reads carry on. " +
		"The freeze you remember was most likely a plain CREATE INDEX, which blocks writes for the whole build. Concurrent builds " +
		"are slower, scan the table twice and must wait for older transactions to finish, so start it early in a quiet window, watch " +
		"pg_stat_progress_create_index, and check afterwards that the index is valid: a failed concurrent build leaves an INVALID " +
		"index behind that you should drop and retry."},
	{"user", "Great, thanks. Last question: the CSV is 1.8 GB now and the upload to S3 sometimes takes 9 minutes on its own. " +
		"Is it worth compressing it, and should we switch to multipart upload? The consumers are a Python script on the finance " +
		"side and a vendor's SFTP pickup, and I'm not sure the vendor can read gzip files."},
	{"assistant", "Compressing usually pays off for CSV: shipment data with repeated carrier names and dates often shrinks to a " +
		"tenth of its size with gzip, so the upload gets much shorter and costs less. Multipart upload helps regardless, since " +
		"parts upload in parallel and a failed part is retried alone; most SDKs switch to it automatically above a threshold. " +
		"For the vendor, ask before changing anything. If they cannot read gzip, keep writing a plain copy for their pickup and " +
		"give finance the compressed one."},
}

// chatSizes returns the scenario's request shapes: a short chat and a
// ten-turn chat of about 1,000 tokens.
func chatSizes() []chatSize {
	return []chatSize{
		{"short", shortChat},
		{"1k", longChat},
	}
}

// pickSizes returns the sizes list names ("short,1k"), in its order.
func pickSizes(list string) ([]chatSize, error) {
	var out []chatSize
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(chatSizes(), func(s chatSize) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("-sizes: unknown size %q (short, 1k)", name)
		}
		out = append(out, chatSizes()[i])
	}
	return out, nil
}

func shortChat(model string, n int64) []byte {
	return marshalChat(chatRequest{Model: model, MaxTokens: 8, Messages: []chatMessage{
		{"system", "You are terse. Ticket " + strconv.FormatInt(n, 10) + "."},
		{"user", "Say hello in five words."},
	}})
}

func longChat(model string, n int64) []byte {
	msgs := make([]chatMessage, 0, 1+len(longTurns)+1)
	msgs = append(msgs, chatMessage{"system", "You are a patient support engineer for a logistics company's data team. " +
		"This is ticket " + strconv.FormatInt(n, 10) + "; answer precisely and say when you are unsure."})
	msgs = append(msgs, longTurns...)
	msgs = append(msgs, chatMessage{"user", "Summarise the plan in three bullet points, please."})
	return marshalChat(chatRequest{Model: model, MaxTokens: 8, Messages: msgs})
}

func marshalChat(r chatRequest) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // strings and ints only
	}
	return b
}

// loadTokenizer returns the model the proxy scenario counts with: "qwen3"
// from the downloaded fixtures (make fixtures), or the built-in "demo".
// fixturesDir "" is .fixtures/models under the repository root.
func loadTokenizer(name, fixturesDir string) (*tokenize.Model, error) {
	if name == "demo" {
		return tokenize.Builtin("demo")
	}
	if fixturesDir == "" {
		root := fixtures.Root()
		if root == "" {
			return nil, fmt.Errorf("-tokenizer %s: no go.mod above the working directory; run from the repository or pass -fixtures DIR", name)
		}
		fixturesDir = filepath.Join(root, ".fixtures", "models")
	}
	dir := filepath.Join(fixturesDir, name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("-tokenizer %s: the fixture tokenizer is missing (%s): run `make fixtures`, or use -tokenizer demo", name, dir)
		}
		return nil, fmt.Errorf("-tokenizer %s: %w", name, err)
	}
	return tokenize.LoadDir(dir, tokenize.LoadOptions{})
}

// promptTokens counts body's prompt as the simulator (and vLLM) does.
func promptTokens(m *tokenize.Model, body []byte) (int, error) {
	return sim.ModelTokenizer(m).ChatPromptTokens(body)
}

// demoChat is the short chat of the scenarios whose gateway counts nothing
// (chatBody, model "demo"), the same bytes every time.
func demoChat() []byte { return []byte(chatBody) }
