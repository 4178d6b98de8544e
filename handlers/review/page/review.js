// The systemone review page. It shows the next unlabelled entry of the
// review stream, takes a label per question by click or key press, PUTs the
// labels and moves on. Every piece of item data goes into the page as text
// (textContent, text nodes), never as HTML: entries hold whatever clients
// sent to the evaluation service.
'use strict';

(() => {
	// The API lives next to the page, wherever it is mounted: /review/ ->
	// /review/items.
	const base = location.pathname.endsWith('/') ? location.pathname : location.pathname + '/';
	const reviewerKey = 'systemone-review.reviewer';

	const $ = (id) => document.getElementById(id);
	const ui = {
		reviewer: $('reviewer'), reload: $('reload'), status: $('status'), error: $('error'),
		item: $('item'), meta: $('meta'), content: $('content'), questions: $('questions'),
		save: $('save'), skip: $('skip'),
	};

	const state = {
		item: null,     // the item shown
		kinds: {},      // question id -> {options: [keys], tiers: [descriptions]} from the stored request
		labels: {},     // question id -> label
		active: 0,      // index of the question keys apply to
		cursor: '',     // the last item id passed (labelled or skipped)
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

	// load shows the next unlabelled item after the cursor. With nothing
	// after it, it looks once more from the start, where skipped items
	// remain.
	async function load(fromStart) {
		if (fromStart) state.cursor = '';
		state.busy = true;
		setStatus('loading', 'Loading…');
		clearError();
		try {
			for (let wrapped = !state.cursor; ;) {
				let url = base + 'items?unlabeled=1&limit=1';
				if (state.cursor) url += '&after=' + encodeURIComponent(state.cursor);
				const resp = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' });
				const body = await readJSON(resp);
				if (!resp.ok || !body) throw new Error(apiError(resp, body));
				if (body.items.length > 0) {
					show(body.items[0]);
					return;
				}
				if (body.next) {
					// The server stopped scanning a long labelled stretch.
					state.cursor = body.next;
					continue;
				}
				if (wrapped) break;
				wrapped = true;
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
		renderMeta(item);
		renderContent(item);
		renderQuestions();
		setStatus('ready', 'Item ' + item.id);
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
		} else {
			parts.push(el('p', { className: 'note' }, 'This entry holds no content (the gateway queues content only with include_content): judge it from the request id.'));
		}
		if (item.response !== undefined) {
			parts.push(el('details', null, el('summary', null, 'Response'), el('pre', null, text(item.response))));
		}
		ui.content.replaceChildren(...parts);
	}

	// modelAnswer describes the model's answer to q.
	function modelAnswer(q) {
		if (q.answer === null || q.answer === undefined) return 'unreadable';
		if (q.type === 'noul') return q.answer + (q.answer >= 0.5 ? ' (yes)' : ' (no)');
		return String(q.answer);
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
			const conf = q.confidence === null || q.confidence === undefined ? 'unreadable' : Number(q.confidence).toFixed(2);
			article.append(el('p', { className: 'answer' },
				'Model: ', el('strong', null, modelAnswer(q)), ', confidence ', conf, ', routed ', q.route));
			article.append(controls(q, i));
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

	async function save() {
		const item = state.item;
		if (!item || state.busy) return;
		const reviewer = ui.reviewer.value.trim();
		if (!reviewer) {
			showError('Enter your name as reviewer first.');
			ui.reviewer.focus();
			return;
		}
		storeReviewer(reviewer);
		const labels = {};
		for (const q of item.questions) if (q.id in state.labels) labels[q.id] = state.labels[q.id];
		if (Object.keys(labels).length === 0) return;
		state.busy = true;
		setStatus('saving', 'Saving…');
		clearError();
		try {
			const resp = await fetch(base + 'items/' + encodeURIComponent(item.id) + '/labels', {
				method: 'PUT', credentials: 'same-origin',
				headers: { 'Content-Type': 'application/json' },
				body: JSON.stringify({ labels, reviewer }),
			});
			if (resp.status !== 204) throw new Error(apiError(resp, await readJSON(resp)));
			state.cursor = item.id;
			state.busy = false;
			await load(false);
			if (document.body.dataset.status !== 'error') ui.status.textContent = 'Saved ' + item.id + '. ' + ui.status.textContent;
		} catch (e) {
			state.busy = false;
			showError('Saving failed: ' + e.message);
			setStatus('ready', 'Item ' + item.id);
		}
	}

	function skip() {
		if (!state.item || state.busy) return;
		state.cursor = state.item.id;
		load(false);
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

	ui.reviewer.value = storedReviewer();
	ui.reviewer.addEventListener('change', () => storeReviewer(ui.reviewer.value.trim()));
	ui.reload.addEventListener('click', () => { if (!state.busy) load(true); });
	ui.save.addEventListener('click', save);
	ui.skip.addEventListener('click', skip);
	document.addEventListener('keydown', onKey);
	load(true);
})();
