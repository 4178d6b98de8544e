// Package payload builds the evaluation requests the benchmarks send: the
// same bytes for the load benchmark, the soak and the in-process `go test
// -bench` runs, so their numbers describe the same work.
//
// Every body is deterministic, passes the gateway's validation and the
// upstream's, and holds no phrase the guardrails service flags: a benchmark
// measures the checks, not refusals.
package payload

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Languages of the text in a payload.
const (
	English = "en"
	Chinese = "zh"
)

// Sizes of the payloads, as the benchmark names them.
const (
	Small  = "small"
	Medium = "32k"
	Large  = "256k"
)

// Payload is one evaluation request body and what went into it.
type Payload struct {
	// Name is "<size>-<language>", e.g. "32k-zh".
	Name      string
	Size      string
	Language  string
	Questions int
	// StateBytes is the length of the state's text, in bytes of UTF-8.
	StateBytes int
	Body       []byte
}

// shape is a payload size: the state's text length and the question count.
type shape struct {
	size       string
	stateBytes int
	questions  int
}

var shapes = []shape{
	{Small, 0, 1}, // one sentence
	{Medium, 32 << 10, 10},
	{Large, 256 << 10, 50},
}

// All returns every payload: each size in English and in Chinese, smallest
// first.
func All() []Payload {
	var out []Payload
	for _, s := range shapes {
		for _, lang := range []string{English, Chinese} {
			out = append(out, build(s, lang))
		}
	}
	return out
}

// Get returns the payload named "<size>-<language>", e.g. "256k-en".
func Get(name string) (Payload, error) {
	size, lang, _ := strings.Cut(name, "-")
	for _, s := range shapes {
		if s.size == size && (lang == English || lang == Chinese) {
			return build(s, lang), nil
		}
	}
	return Payload{}, fmt.Errorf("unknown payload %q: want <small|32k|256k>-<en|zh>", name)
}

// Names returns the names of every payload, in All's order.
func Names() []string {
	var names []string
	for _, p := range All() {
		names = append(names, p.Name)
	}
	return names
}

func build(s shape, lang string) Payload {
	// One seed per payload: the same name always gives the same bytes.
	rng := rand.New(rand.NewPCG(uint64(s.stateBytes), uint64(len(lang)+s.questions)))
	text := texts[lang]
	var state string
	if s.stateBytes == 0 {
		state = text.sentences[0]
	} else {
		state = prose(rng, text, s.stateBytes)
	}
	var b strings.Builder
	b.Grow(len(state) + s.questions*400 + 256)
	b.WriteString(`{"model":"service-latest","state":`)
	b.WriteString(strconv.Quote(state))
	b.WriteString(`,"questions":{`)
	for i := range s.questions {
		if i > 0 {
			b.WriteByte(',')
		}
		writeQuestion(&b, rng, text, i)
	}
	b.WriteString(`}}`)
	return Payload{
		Name:       s.size + "-" + lang,
		Size:       s.size,
		Language:   lang,
		Questions:  s.questions,
		StateBytes: len(state),
		Body:       []byte(b.String()),
	}
}

// prose is paragraphs of sentences drawn from text, n bytes long (cut at a
// character boundary), with the line breaks a transcript has.
func prose(rng *rand.Rand, text language, n int) string {
	var b strings.Builder
	b.Grow(n + 256)
	for b.Len() < n {
		for range 3 + rng.IntN(4) {
			b.WriteString(text.sentences[rng.IntN(len(text.sentences))])
			b.WriteString(text.space)
		}
		b.WriteString("\n\n")
	}
	s := b.String()[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// writeQuestion writes question i: types in turn noul, choice (four
// options), score (five tiers).
func writeQuestion(b *strings.Builder, rng *rand.Rand, text language, i int) {
	fmt.Fprintf(b, `"q%02d_%s":{`, i+1, []string{"resolved", "tone", "quality"}[i%3])
	instructions := strconv.Quote(text.questions[rng.IntN(len(text.questions))])
	switch i % 3 {
	case 0:
		b.WriteString(`"type":"noul","instructions":` + instructions)
	case 1:
		b.WriteString(`"type":"choice","instructions":` + instructions + `,"criteria":{`)
		for j, option := range []string{"polite", "neutral", "curt", "hostile"} {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(option) + ":" + strconv.Quote(text.options[j]))
		}
		b.WriteString(`}`)
	default:
		b.WriteString(`"type":"score","instructions":` + instructions + `,"criteria":[`)
		for j, tier := range text.tiers {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(tier))
		}
		b.WriteString(`]`)
	}
	b.WriteString(`}`)
}

// language is the text a payload is written in: a customer-support
// conversation, neutral by construction.
type language struct {
	space     string // between sentences
	sentences []string
	questions []string
	options   []string // descriptions of the four choice options
	tiers     []string // the five score tiers
}

var texts = map[string]language{
	English: {
		space: " ",
		sentences: []string{
			"The customer wrote that the parcel arrived two days later than promised.",
			"Our agent apologised for the delay and checked the tracking number in the system.",
			"The courier had scanned the box at the regional depot on Tuesday morning.",
			"She asked whether the shipping fee could be refunded, since she paid for express delivery.",
			"The agent explained the refund policy and offered a voucher for the next order.",
			"\"That works for me,\" the customer replied, \"as long as it is applied today.\"",
			"The voucher was issued within five minutes and confirmed by email.",
			"Later the customer asked about the warranty on the kettle she had ordered.",
			"The agent listed the steps to register the product on the website.",
			"A follow-up message thanked the team for the quick and friendly answer.",
			"The conversation was closed after the customer confirmed she had no more questions.",
			"Delivery times in the northern region were longer this week because of the weather.",
		},
		questions: []string{
			"Was the customer's issue resolved by the end of the conversation?",
			"How would you describe the tone of the agent's replies?",
			"Rate how complete and accurate the agent's answers were.",
			"Did the agent follow the refund policy as written?",
			"Was the customer satisfied with the outcome?",
		},
		options: []string{
			"Courteous and warm throughout.",
			"Matter-of-fact, neither warm nor cold.",
			"Short replies that skip pleasantries.",
			"Rude or dismissive at any point.",
		},
		tiers: []string{
			"Wrong or missing answers.",
			"Mostly wrong, some useful parts.",
			"Partly right, notable gaps.",
			"Right, with minor gaps.",
			"Complete and accurate.",
		},
	},
	Chinese: {
		space: "",
		sentences: []string{
			"客户反映包裹比承诺的时间晚到了两天。",
			"客服人员为延误道歉，并在系统中查询了运单号。",
			"快递员在星期二上午把包裹扫描进了区域仓库。",
			"她问能否退还运费，因为她选择的是加急配送。",
			"客服解释了退款政策，并为下一次订单提供了一张优惠券。",
			"“这样可以，”客户回答，“只要今天能用上就行。”",
			"优惠券在五分钟内发放，并通过电子邮件确认。",
			"随后客户询问了她订购的水壶的保修情况。",
			"客服列出了在网站上注册产品的步骤。",
			"一条后续消息感谢团队快速而友好的回复。",
			"客户确认没有其他问题后，对话结束。",
			"由于天气原因，本周北方地区的配送时间较长。",
		},
		questions: []string{
			"对话结束时客户的问题是否得到了解决？",
			"你如何描述客服回复的语气？",
			"请评价客服回答的完整性和准确性。",
			"客服是否按照书面的退款政策处理？",
			"客户对结果是否满意？",
		},
		options: []string{
			"始终礼貌热情。",
			"就事论事，不冷不热。",
			"回复简短，省略寒暄。",
			"在任何时候粗鲁或敷衍。",
		},
		tiers: []string{
			"回答错误或缺失。",
			"大部分错误，有少量有用内容。",
			"部分正确，有明显遗漏。",
			"正确，略有遗漏。",
			"完整且准确。",
		},
	},
}
