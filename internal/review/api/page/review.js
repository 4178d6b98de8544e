// The systemone review page. It shows the next unlabelled entry of the
// review stream (the oldest audited one first: only audited labels count
// for calibration; then the oldest other one), takes a label per question
// by click or key press, PUTs the labels and moves on. Below, each group's
// progress toward a threshold at a target the reviewer sets (/progress). Every piece of item data goes into the page as text
// (textContent, text nodes), never as HTML: entries hold whatever clients
// sent to the evaluation service.
'use strict';

(() => {
	// The API lives next to the page, wherever it is mounted: /review/ ->
	// /review/items. Request URLs are built from location.origin, which
	// never holds credentials: opened as http://user:pass@host/review/, the
	// page's own URL does, and fetch refuses any URL resolved against it
	// ("Request cannot be constructed from a URL that includes
	// credentials"). The browser still sends the basic_auth it was given.
	const base = location.origin + (location.pathname.endsWith('/') ? location.pathname : location.pathname + '/');
	const reviewerKey = 'systemone-review.reviewer';
	const targetKey = 'systemone-review.target';
	const byKey = 'systemone-review.by';

	const $ = (id) => document.getElementById(id);
	const ui = {
		reviewer: $('reviewer'), reload: $('reload'), status: $('status'), error: $('error'),
		item: $('item'), kind: $('kind'), meta: $('meta'), content: $('content'), questions: $('questions'),
		save: $('save'), skip: $('skip'), pass: $('pass'),
		target: $('target'), by: $('by'), byNote: $('by-note'), progressStatus: $('progress-status'), groups: $('groups'),
	};
	// The guarantee's banner, starting points and diagrams (guarantee.js).
	const guarantee = window.systemoneGuarantee;

	const state = {
		item: null,     // the item shown
		kinds: {},      // question id -> {options: [keys], tiers: [descriptions]} from the stored request
		labels: {},     // question id -> label
		active: 0,      // index of the question keys apply to
		phase: 'audit', // 'audit': unlabelled audited entries; 'rest': the others
		cursor: '',     // the last item id passed (labelled or skipped) in this phase
		waitingOn: '', // the oldest entry holding a group's evidence back (/progress waiting_on)
		busy: false,
	};

	// el builds an element; string children become text nodes.
	function el(tag, props, ...children) {
		const e = document.createElement(tag);
		for (const [k, v] of Object.entries(props || {})) {
			if (k === 'dataset') Object.assign(e.dataset, v);
			else if (k === 'onclick') e.addEventListener('click', v);
			else e[k] = v;
		}
		for (const c of children) {
			if (c === null || c === undefined) continue;
			e.append(typeof c === 'string' ? document.createTextNode(c) : c);
		}
		return e;
	}

	// text shows any JSON value as text: strings as they are, the rest as
	// indented JSON.
	function text(v) {
		return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
	}

	function setStatus(status, message) {
		document.body.dataset.status = status;
		ui.status.textContent = message || '';
	}

	function showError(message) {
		ui.error.textContent = message;
		ui.error.hidden = false;
	}

	function clearError() {
		ui.error.textContent = '';
		ui.error.hidden = true;
	}

	// apiError turns an error answer into one line: the detail string, or
	// the validation list's locations and messages.
	function apiError(resp, body) {
		const detail = body && body.detail;
		if (Array.isArray(detail)) {
			return resp.status + ': ' + detail.map((d) => (d.loc || []).slice(1).join(' › ') + ': ' + d.msg).join('; ');
		}
		return resp.status + ': ' + (typeof detail === 'string' ? detail : resp.statusText);
	}

	async function readJSON(resp) {
		try {
			return await resp.json();
		} catch (e) {
			return null;
		}
	}

	function storedReviewer() {
		try {
			return localStorage.getItem(reviewerKey) || '';
		} catch (e) {
			return ''; // storage off: the name is asked for each session
		}
	}

	function storeReviewer(name) {
		try {
			localStorage.setItem(reviewerKey, name);
		} catch (e) {
			// storage off: keep the name for this page only
		}
	}

	// api returns the absolute URL of an API path (with its query).
	function api(path) {
		return base + path;
	}

	async function getJSON(path) {
		const resp = await fetch(api(path), { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' });
		const body = await readJSON(resp);
		if (!resp.ok || !body) throw new Error(apiError(resp, body));
		return body;
	}

	// load shows the next unlabelled item after the cursor: the audited
	// entries first, oldest first, then the others. With nothing after the
	// cursor in both, it looks once more from the start, where skipped
	// items remain.
	async function load(fromStart) {
		if (fromStart) {
			state.phase = 'audit';
			state.cursor = '';
		}
		state.busy = true;
		setStatus('loading', 'Loading…');
		clearError();
		try {
			// The entry holding the evidence back comes first, unless it
			// was just saved or skipped.
			if (state.waitingOn && state.waitingOn !== state.cursor && state.waitingOn !== (state.item && state.item.id)) {
				try {
					const held = await getJSON('items/' + encodeURIComponent(state.waitingOn));
					if (held.audit && held.questions.some((q) => !(held.labels && q.id in held.labels))) {
						show(held);
						return;
					}
				} catch (e) { /* trimmed or gone: on to the queue */ }
			}
			for (let wrapped = fromStart || (state.phase === 'audit' && !state.cursor); ;) {
				let path = 'items?unlabeled=1&limit=1' + (state.phase === 'audit' ? '&audit=1' : '');
				if (state.cursor) path += '&after=' + encodeURIComponent(state.cursor);
				const body = await getJSON(path);
				const next = body.items[0];
				if (next && state.phase === 'rest' && next.audit) {
					// An audited entry skipped earlier: it came first in
					// its own phase.
					state.cursor = next.id;
					continue;
				}
				if (next) {
					show(next);
					return;
				}
				if (body.next) {
					// The server stopped scanning a long stretch without a match.
					state.cursor = body.next;
					continue;
				}
				if (state.phase === 'audit') {
					state.phase = 'rest';
					state.cursor = '';
					continue;
				}
				if (wrapped) break;
				wrapped = true;
				state.phase = 'audit';
				state.cursor = '';
			}
			state.item = null;
			ui.item.hidden = true;
			setStatus('empty', 'Nothing left to review.');
		} catch (e) {
			showError('Loading failed: ' + e.message);
			setStatus('error', '');
		} finally {
			state.busy = false;
		}
	}

	// kindsOf reads each question's options (choice) and tier descriptions
	// (score) from the stored request, when the entry has one.
	function kindsOf(item) {
		const kinds = {};
		const qs = item.request && typeof item.request === 'object' && item.request.questions;
		if (!qs || typeof qs !== 'object') return kinds;
		for (const [id, q] of Object.entries(qs)) {
			if (!q || typeof q !== 'object') continue;
			if (q.type === 'choice' && q.criteria && typeof q.criteria === 'object' && !Array.isArray(q.criteria)) {
				kinds[id] = { options: Object.keys(q.criteria), descriptions: q.criteria };
			} else if (q.type === 'score' && Array.isArray(q.criteria)) {
				kinds[id] = { tiers: q.criteria };
			}
		}
		return kinds;
	}

	function show(item) {
		state.item = item;
		state.kinds = kindsOf(item);
		state.labels = Object.assign({}, item.labels || {});
		state.active = 0;
		ui.item.hidden = false;
		ui.item.dataset.id = item.id;
		renderKind(item);
		renderMeta(item);
		renderContent(item);
		renderQuestions();
		setStatus('ready', 'Item ' + item.id);
	}

	// renderKind says whether the item's labels count for calibration.
	function renderKind(item) {
		ui.kind.dataset.kind = item.audit ? 'audit' : 'routine';
		// audit_p alone is the uniform audit's share (`audit 1` too); the
		// active audit's entries carry its floor beside it.
		const active = item.audit_floor !== undefined && item.audit_floor !== null;
		ui.kind.textContent = !item.audit ? ''
			: active
				? 'Counts for calibration: this entry was drawn by the active audit, with probability ' + item.audit_p +
				  ' (less confident answers are drawn more often); calibrate weighs it by that chance. Its labels decide the thresholds.'
				: 'Counts for calibration: this entry was drawn by the audit, a uniform sample of all answers. Its labels decide the thresholds.';
		if (item.audit) return;
		ui.kind.textContent = 'Routine human review: this answer was routed to a person. Label it for the client; it does not count for calibration.';
	}

	function renderMeta(item) {
		const rows = [
			['Entry', item.id], ['Model', item.model], ['Route', item.route + ' (' + item.reason + ')'],
			['Audit', item.audit ? 'drawn by audit' : 'no'], ['Request', item.request_id], ['Org', item.org], ['Queued', item.ts],
		];
		const dl = el('dl');
		for (const [k, v] of rows) dl.append(el('dt', null, k), el('dd', null, String(v === undefined ? '' : v)));
		ui.meta.replaceChildren(dl);
	}

	function renderContent(item) {
		const parts = [];
		if (item.request && typeof item.request === 'object' && 'state' in item.request) {
			parts.push(el('h2', null, 'State'), el('pre', { className: 'state' }, text(item.request.state)));
		} else if (item.request !== undefined) {
			parts.push(el('h2', null, 'Request'), el('pre', null, text(item.request)));
		} else if ((item.content_too_large || []).includes('request')) {
			parts.push(el('p', { className: 'note' }, 'The request was larger than the gateway\'s max_content and was not stored: judge it from the request id.'));
		} else {
			parts.push(el('p', { className: 'note' }, 'This entry holds no content (the gateway queues content only with include_content): judge it from the request id.'));
		}
		if (item.response !== undefined) {
			parts.push(el('details', null, el('summary', null, 'Response'), el('pre', null, text(item.response))));
		}
		ui.content.replaceChildren(...parts);
	}

	// modelAnswer describes a model's answer to a question of type type.
	function modelAnswer(type, answer) {
		if (answer === null || answer === undefined) return 'unreadable';
		if (type === 'noul') return answer + (answer >= 0.5 ? ' (yes)' : ' (no)');
		return String(answer);
	}

	function confidenceText(c) {
		return c === null || c === undefined ? 'unreadable' : Number(c).toFixed(2);
	}

	// answers shows the model's answer to q: for a question an escalate
	// block asked again, both versions' answers, and which one the client
	// got (the second when it routed the question auto).
	function answers(item, q) {
		const esc = q.escalated;
		if (!esc || typeof esc !== 'object') {
			return [el('p', { className: 'answer' },
				'Model: ', el('strong', null, modelAnswer(q.type, q.answer)), ', confidence ', confidenceText(q.confidence), ', routed ', q.route)];
		}
		const secondServed = esc.route === 'auto';
		const served = () => el('span', { className: 'served' }, ' (the client got this answer)');
		return [
			el('p', { className: 'answer escalation-note' }, 'Asked again: the first version\'s answer routed it to a person' +
				(q.reason ? ' (' + q.reason + ')' : '') + ', so ', esc.model, ' was asked too; the question routed ', q.route, '. Label the question itself: the label is checked against both answers.'),
			el('p', { className: 'answer first' + (secondServed ? '' : ' got'), dataset: { stage: '1' } },
				'First version ', el('code', null, item.model), ': ', el('strong', null, modelAnswer(q.type, q.answer)),
				', confidence ', confidenceText(q.confidence), secondServed ? null : served()),
			el('p', { className: 'answer second' + (secondServed ? ' got' : ''), dataset: { stage: '2' } },
				'Second version ', el('code', null, esc.model), ': ', el('strong', null, modelAnswer(q.type, esc.answer)),
				', confidence ', confidenceText(esc.confidence), ', routed ', esc.route, secondServed ? served() : null),
		];
	}

	function renderQuestions() {
		const item = state.item;
		const request = item.request && typeof item.request === 'object' ? item.request : null;
		const nodes = item.questions.map((q, i) => {
			const asked = request && request.questions && request.questions[q.id];
			const article = el('article', {
				className: 'question' + (i === state.active ? ' active' : '') + (q.id in state.labels ? ' labelled' : ''),
				dataset: { question: q.id, type: q.type },
			});
			article.addEventListener('click', () => { setActive(i); });
			article.append(el('h3', null, el('span', { className: 'qid' }, q.id), ' ', el('span', { className: 'type' }, q.type)));
			if (asked && asked.instructions !== undefined) article.append(el('pre', { className: 'instructions' }, text(asked.instructions)));
			article.append(...answers(item, q), controls(q, i));
			return article;
		});
		ui.questions.replaceChildren(...nodes);
		const labelled = item.questions.filter((q) => q.id in state.labels).length;
		ui.save.disabled = labelled === 0;
		ui.save.textContent = labelled === item.questions.length ? 'Save labels (Enter)' : 'Save ' + labelled + ' of ' + item.questions.length + ' labels';
	}

	function choiceButton(q, i, label, caption, key) {
		const chosen = q.id in state.labels && state.labels[q.id] === label;
		return el('button', {
			type: 'button', className: chosen ? 'chosen' : '', ariaPressed: String(chosen), title: key ? 'key ' + key : '',
			dataset: { label: JSON.stringify(label) },
			onclick: (e) => { e.stopPropagation(); setLabel(i, label); },
		}, key ? el('kbd', null, key) : null, ' ', caption);
	}

	function controls(q, i) {
		const box = el('div', { className: 'controls' });
		const kind = state.kinds[q.id] || {};
		if (q.type === 'noul') {
			box.append(choiceButton(q, i, true, 'Yes', 'y'), choiceButton(q, i, false, 'No', 'n'));
		} else if (q.type === 'choice') {
			if (kind.options) {
				kind.options.forEach((opt, n) => {
					const d = kind.descriptions[opt];
					box.append(choiceButton(q, i, opt, d === null || d === undefined ? opt : opt + ': ' + text(d), n < 9 ? String(n + 1) : ''));
				});
			} else {
				// Without content the options are unknown: the model's
				// choice, or any key typed in.
				if (typeof q.answer === 'string') box.append(choiceButton(q, i, q.answer, q.answer + ' (the model\'s choice)', 'a'));
				const input = el('input', { type: 'text', placeholder: 'other option key', className: 'other' });
				input.addEventListener('click', (e) => e.stopPropagation());
				input.addEventListener('keydown', (e) => {
					if (e.key === 'Enter' && input.value !== '') {
						e.preventDefault();
						input.blur();
						setLabel(i, input.value);
					}
				});
				box.append(input);
				const chosen = state.labels[q.id];
				if (typeof chosen === 'string' && chosen !== q.answer) box.append(el('span', { className: 'chosen-text' }, 'labelled: ' + chosen));
			}
		} else if (q.type === 'score') {
			const tiers = kind.tiers || Array.from({ length: 10 }, () => null);
			tiers.forEach((d, n) => {
				box.append(choiceButton(q, i, n, d === null || d === undefined ? String(n) : n + ': ' + text(d), n <= 9 ? String(n) : ''));
			});
		}
		return box;
	}

	function setActive(i) {
		if (!state.item) return;
		const n = state.item.questions.length;
		state.active = Math.max(0, Math.min(n - 1, i));
		renderQuestions();
		const node = ui.questions.children[state.active];
		if (node && node.scrollIntoView) node.scrollIntoView({ block: 'nearest' });
	}

	// setLabel labels question i and moves on to the next question without
	// a label.
	function setLabel(i, label) {
		const qs = state.item.questions;
		state.labels[qs[i].id] = label;
		let next = i;
		for (let k = 1; k <= qs.length; k++) {
			const j = (i + k) % qs.length;
			if (!(qs[j].id in state.labels)) {
				next = j;
				break;
			}
		}
		setActive(next);
	}

	// reviewerName is the reviewer's name, remembered for the next visit;
	// "" after asking for it when the field is empty.
	function reviewerName() {
		const reviewer = ui.reviewer.value.trim();
		if (!reviewer) {
			showError('Enter your name as reviewer first.');
			ui.reviewer.focus();
			return '';
		}
		storeReviewer(reviewer);
		return reviewer;
	}

	async function save() {
		const item = state.item;
		if (!item || state.busy) return;
		const reviewer = reviewerName();
		if (!reviewer) return;
		const labels = {};
		for (const q of item.questions) if (q.id in state.labels) labels[q.id] = state.labels[q.id];
		if (Object.keys(labels).length === 0) return;
		await store(item, { labels, reviewer }, 'Saved ');
	}

	// store PUTs body as the item's labels, then moves on to the next item,
	// saying done and the item's id.
	async function store(item, body, done) {
		state.busy = true;
		setStatus('saving', 'Saving…');
		clearError();
		try {
			const resp = await fetch(api('items/' + encodeURIComponent(item.id) + '/labels'), {
				method: 'PUT', credentials: 'same-origin',
				headers: { 'Content-Type': 'application/json' },
				body: JSON.stringify(body),
			});
			if (resp.status !== 204) throw new Error(apiError(resp, await readJSON(resp)));
			state.cursor = item.id;
			loadProgress();
			state.busy = false;
			await load(false);
			if (document.body.dataset.status !== 'error') ui.status.textContent = done + item.id + '. ' + ui.status.textContent;
		} catch (e) {
			state.busy = false;
			showError('Saving failed: ' + e.message);
			setStatus('ready', 'Item ' + item.id);
		}
	}

	// pass stores a pass for the item: it cannot be judged, and counts as
	// disagreeing on every question, so that passing cannot help a
	// threshold.
	async function pass() {
		const item = state.item;
		if (!item || state.busy) return;
		const reviewer = reviewerName();
		if (!reviewer) return;
		await store(item, { pass: true, reviewer }, 'Passed ');
	}

	function skip() {
		if (!state.item || state.busy) return;
		state.cursor = state.item.id;
		load(false);
	}

	// The number a threshold is pasted as: at most 4 decimals, rounded up
	// (as calibrate writes it).
	function threshold(t) {
		return String(Math.ceil(t * 10000 - 1e-9) / 10000);
	}

	// escalatedTitle says what an escalated group of /progress holds and
	// what it was calibrated under.
	function escalatedTitle(g) {
		const under = g.under_threshold === null || g.under_threshold === undefined
			? 'every question of the type (' + g.escalated_from + ' has no threshold here)'
			: 'the questions ' + g.escalated_from + ' answers below ' + threshold(g.under_threshold) + ' (its threshold here)';
		return 'Second answers of ' + g.model + ' to ' + under + '; its threshold goes in the block ' + guarantee.escalateBlock(g) +
			(g.delta !== undefined ? ', calibrated at delta ' + g.delta : '');
	}

	// The groupings /progress takes (by=...), the page's default first.
	const groupings = ['type', 'question', 'org'];

	// loadProgress shows, per group (per model and type, per question, or
	// per organization, as the reviewer chooses), the labels so far, the
	// agreement, the threshold calibrate would give now at the target, the
	// labels it still needs at the least (labels_needed) and the labels it
	// would likely take at the agreement seen so far (labels_expected),
	// when the gateway reports them.
	let progressSeq = 0;
	async function loadProgress() {
		const target = ui.target.value.trim();
		const by = ui.by.value;
		const seq = ++progressSeq;
		ui.progressStatus.textContent = 'Loading…';
		ui.byNote.hidden = by !== 'org';
		try {
			// The alarms first: a label just saved may have raised one, and
			// an alarm's raised_at is the natural starting point.
			await guarantee.load();
			const since = guarantee.since();
			const body = await getJSON('progress?target=' + encodeURIComponent(target) + '&by=' + encodeURIComponent(by) +
				(since ? '&since=' + encodeURIComponent(since) : ''));
			if (seq !== progressSeq) return; // a newer target, grouping or starting point asked meanwhile
			const rows = body.groups.map((g) => {
				const passed = g.threshold !== null && g.threshold !== undefined;
				const needed = g.labels_needed === undefined ? '–' : String(g.labels_needed);
				const expected = g.labels_expected === undefined || g.labels_expected === null ? '–' : String(g.labels_expected);
				// An escalated group (the second stage) holds the second
				// version's answers to the first version's escalated
				// questions: named by both, its threshold the escalate
				// block's.
				const from = g.escalated_from || '';
				// Only per organization does a group have an org: "" there is
				// the pool of the organizations without a group of their own;
				// second answers always pool (the escalate block has no
				// organization lines).
				const org = by !== 'org' ? '(all)' : from ? '(all, pooled)' : (g.org || 'others, pooled');
				// The threshold in force, in warning colours when the labels
				// of the window agree less than the target at or above it.
				const inForce = guarantee.inForce(g, body.target, since);
				return el('tr', {
					className: (passed ? 'passed' : '') + (from ? ' escalated' : ''),
					dataset: { model: g.model, type: g.type, question: g.question, org: g.org || '', stage: String(g.stage || 1), escalatedFrom: from },
				},
					el('td', { className: 'model', title: from ? escalatedTitle(g) : '' }, from ? g.model + ', escalated from ' + from : g.model),
					el('td', null, g.type), el('td', null, g.question || '(all)'),
					el('td', { className: 'org' }, org),
					el('td', null, String(g.labels)),
					// agree/n at the first candidate calibrate tested; none is
					// tested until enough labels share the top confidences.
					el('td', null, g.n > 0 ? g.agree + '/' + g.n + ' (' + (100 * g.agree / g.n).toFixed(1) + '%)' : 'too few at the top'),
					el('td', { className: 'threshold' }, passed ? threshold(g.threshold) + (from ? ' (' + guarantee.escalateBlock(g) + ')' : '') : 'none yet'),
					el('td', { className: 'in-force' + (inForce.warn ? ' warn' : ''), title: inForce.title }, inForce.text),
					el('td', { className: 'needed' }, needed),
					el('td', { className: 'expected' }, expected),
					// How far the complete prefix (the evidence) reaches.
					el('td', { className: 'prefix' }, g.waiting_on ? 'waiting on ' + g.waiting_on + (g.complete_through ? ' (through ' + g.complete_through + ')' : '') : (g.complete_through ? 'through ' + g.complete_through : '–')),
					el('td', { className: 'late' }, g.late_corrections === undefined || g.late_corrections === null ? '–' : String(g.late_corrections)));
			});
			// The oldest entry holding a group's evidence back: served first.
			const waiting = body.groups.map((g) => g.waiting_on).filter((w) => w).sort((a, b) => {
				const [am, as] = a.split('-').map(Number), [bm, bs] = b.split('-').map(Number);
				return am - bm || as - bs;
			});
			state.waitingOn = waiting[0] || '';
			ui.groups.tBodies[0].replaceChildren(...rows);
			ui.groups.hidden = rows.length === 0;
			guarantee.draw(body, since);
			ui.progressStatus.textContent = 'Target ' + body.target + (since ? ', entries from ' + since + ' on' : '') + ': ' + (rows.length === 0
				? 'no audited labels yet.'
				: rows.length + ' group(s); ' + body.ignored + ' label(s) of routine entries do not count.');
			ui.progressStatus.dataset.target = String(body.target);
			ui.progressStatus.dataset.by = by;
			ui.progressStatus.dataset.since = since;
		} catch (e) {
			if (seq !== progressSeq) return;
			ui.groups.hidden = true;
			guarantee.draw({ groups: [] }, '');
			ui.progressStatus.textContent = 'Progress unavailable: ' + e.message;
			delete ui.progressStatus.dataset.target;
			delete ui.progressStatus.dataset.by;
			delete ui.progressStatus.dataset.since;
		}
	}

	function onKey(e) {
		if (e.ctrlKey || e.metaKey || e.altKey) return;
		const t = e.target;
		if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT')) {
			if (e.key === 'Escape') t.blur();
			return;
		}
		if (e.key === 'r') {
			e.preventDefault();
			if (!state.busy) load(true);
			return;
		}
		const item = state.item;
		if (!item || state.busy) return;
		const q = item.questions[state.active];
		const kind = (q && state.kinds[q.id]) || {};
		let handled = true;
		switch (e.key) {
		case 'Enter':
			if (item.questions.every((x) => x.id in state.labels)) save();
			break;
		case 's': skip(); break;
		case 'p': pass(); break;
		case 'ArrowDown': case 'j': setActive(state.active + 1); break;
		case 'ArrowUp': case 'k': setActive(state.active - 1); break;
		default:
			handled = false;
			if (!q) break;
			if (q.type === 'noul' && (e.key === 'y' || e.key === 'n')) {
				setLabel(state.active, e.key === 'y');
				handled = true;
			} else if (q.type === 'choice') {
				if (e.key === 'a' && typeof q.answer === 'string') {
					setLabel(state.active, q.answer);
					handled = true;
				} else if (kind.options && /^[1-9]$/.test(e.key) && Number(e.key) <= kind.options.length) {
					setLabel(state.active, kind.options[Number(e.key) - 1]);
					handled = true;
				}
			} else if (q.type === 'score' && /^[0-9]$/.test(e.key)) {
				const n = Number(e.key);
				if (!kind.tiers || n < kind.tiers.length) {
					setLabel(state.active, n);
					handled = true;
				}
			}
		}
		if (handled) e.preventDefault();
	}

	// The signed-in user (basic_auth) is the reviewer: the API records the
	// labels under that name whatever the page sends.
	const signedIn = document.querySelector('meta[name="systemone-user"]');
	if (signedIn && signedIn.content) {
		ui.reviewer.value = signedIn.content;
		ui.reviewer.readOnly = true;
		ui.reviewer.title = 'Signed in as ' + signedIn.content;
	} else {
		ui.reviewer.value = storedReviewer();
	}
	let storedTarget = null;
	try {
		storedTarget = localStorage.getItem(targetKey);
	} catch (e) {
		// storage off: the default target
	}
	if (storedTarget) ui.target.value = storedTarget;
	try {
		const storedBy = localStorage.getItem(byKey);
		if (groupings.includes(storedBy)) ui.by.value = storedBy;
	} catch (e) {
		// storage off: the default grouping
	}
	ui.by.addEventListener('change', () => {
		try { localStorage.setItem(byKey, ui.by.value); } catch (e) { /* storage off */ }
		loadProgress();
	});
	ui.target.addEventListener('change', () => {
		try { localStorage.setItem(targetKey, ui.target.value.trim()); } catch (e) { /* storage off */ }
		loadProgress();
	});
	guarantee.onSinceChange(loadProgress);
	ui.reviewer.addEventListener('change', () => storeReviewer(ui.reviewer.value.trim()));
	ui.reload.addEventListener('click', () => { if (!state.busy) load(true); });
	ui.save.addEventListener('click', save);
	ui.skip.addEventListener('click', skip);
	ui.pass.addEventListener('click', pass);
	document.addEventListener('keydown', onKey);
	// Without a target of the reviewer's own, the monitor's target: the one
	// the thresholds are watched at (else the page's default). The first
	// item waits for the progress, which names the entry holding the
	// evidence back (waiting_on): that one is served first.
	(async () => {
		if (!storedTarget) {
			// Without a monitor (or with its state unread) load answers
			// null: the page's default.
			const g = await guarantee.load();
			if (g && typeof g.target === 'number') ui.target.value = String(g.target);
		}
		await loadProgress();
		load(true);
	})();
})();
