package paramtemplate_test

import (
	"fmt"

	"github.com/clawdbot/task-service/store/paramtemplate"
)

func Example() {
	params, err := paramtemplate.Parse(`{"ticker": "{{key}}", "subreddit": "{{sub}}"}`)
	if err != nil {
		panic(err) // a caller answering a client says: params_template: <err>
	}
	title, _ := paramtemplate.ParseTitle("Reddit crawl for {{key}}")
	vars := map[string]string{paramtemplate.Key: `NVDA "quoted"`, "sub": "wsb"}
	p, _ := params.Render(vars)
	t, _ := title.Render(vars)
	fmt.Println(string(p))
	fmt.Println(t)
	fmt.Println(params.Names())
	_, err = paramtemplate.Parse(`{"ticker": {{key}}}`)
	fmt.Println(err)
	// Output:
	// {"ticker":"NVDA \"quoted\"","subreddit":"wsb"}
	// Reddit crawl for NVDA "quoted"
	// [key sub]
	// at byte 12: invalid character '{' (placeholders go inside JSON strings: "{{key}}")
}
