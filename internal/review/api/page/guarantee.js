// The review page's view of the guarantee: a banner for each group in
// alarm (and for a guarantee that cannot be read), the starting points
// of the progress panel (all labels, since an alarm, since a reset), and
// per group a reliability diagram drawn from /progress. review.js calls
// it through window.systemoneGuarantee; everything from the API goes into
// the page as text or as SVG attributes, never as HTML.
'use strict';

(() => {
	const svgNS = 'http://www.w3.org/2000/svg';
	const $ = (id) => document.getElementById(id);

	// el builds an HTML element; string children become text nodes.
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

	// svg builds an SVG element with attributes.
	function svg(tag, attrs, ...children) {
		const e = document.createElementNS(svgNS, tag);
		for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
		for (const c of children) e.append(typeof c === 'string' ? document.createTextNode(c) : c);
		return e;
	}

	// groupName names a group of /progress or /guarantee. An escalated
	// group (escalated_from set: the second stage) holds the second
	// version's answers to the questions the first version's answers
	// escalated, a group apart from the second version's own answers, so
	// its name says which first version it is escalated from.
	function groupName(g) {
		return g.model + ' ' + g.type + (g.escalated_from ? ', escalated from ' + g.escalated_from : '') +
			(g.org ? ' (organization ' + g.org + ')' : '');
	}

	// escalateBlock names the route's block a second stage's threshold
	// lives in, as the gateway's configuration writes it.
	function escalateBlock(g) {
		return 'escalate ' + g.escalated_from + ' to ' + g.model;
	}

	// resetPath is the DELETE that resets a /guarantee group: its org
	// (under by org) and the first version of an escalated group are
	// query parameters.
	function resetPath(g) {
		const query = [];
		if (g.org) query.push('org=' + encodeURIComponent(g.org));
		if (g.escalated_from) query.push('escalated_from=' + encodeURIComponent(g.escalated_from));
		return location.pathname.replace(/\/?$/, '/') + 'guarantee/' + encodeURIComponent(g.model) + '/' + encodeURIComponent(g.type) +
			(query.length ? '?' + query.join('&') : '');
	}

	// local shows an RFC 3339 time in the reviewer's time zone beside the
	// time itself, which is what --since takes.
	function local(t) {
		const d = new Date(t);
		return isNaN(d) ? t : t + ' (' + d.toLocaleString() + ')';
	}

	const state = {
		guarantee: null, // the last /guarantee body, null without a monitor or when unread
		chosen: null,    // the starting point the reviewer picked, null: the natural one
	};

	// load reads /guarantee and shows its banner and starting points. It
	// returns the body, or null (no monitor: no banner; unread: the
	// "guarantee unknown" banner).
	async function load() {
		const base = location.origin + (location.pathname.endsWith('/') ? location.pathname : location.pathname + '/');
		let resp, body = null;
		try {
			resp = await fetch(base + 'guarantee', { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' });
			try { body = await resp.json(); } catch (e) { body = null; }
		} catch (e) {
			showUnknown('the review API did not answer (' + e.message + ')');
			return null;
		}
		if (resp.status === 404) {
			state.guarantee = null;
			hideBanner();
			setStartingPoints([]);
			return null;
		}
		if (!resp.ok || !body || !Array.isArray(body.groups)) {
			const detail = body && typeof body.detail === 'string' ? body.detail : resp.statusText;
			showUnknown(resp.status + ' ' + detail);
			return null;
		}
		state.guarantee = body;
		showAlarms(body);
		const points = [];
		for (const g of body.groups) {
			if (g.alarm && g.raised_at) points.push({ value: g.raised_at, label: 'Since the alarm of ' + groupName(g) + ', ' + g.raised_at, alarm: true });
			if (g.reset_at) points.push({ value: g.reset_at, label: 'Since the last reset of ' + groupName(g) + ', ' + g.reset_at, alarm: false });
		}
		setStartingPoints(points);
		return body;
	}

	function hideBanner() {
		const banner = $('guarantee');
		banner.replaceChildren();
		banner.hidden = true;
		delete banner.dataset.kind;
	}

	// showUnknown: the monitor's state cannot be read, so nobody can say
	// whether a group is in alarm; gateways in that state route every
	// question to people (guarantee_unknown).
	function showUnknown(why) {
		state.guarantee = null;
		const banner = $('guarantee');
		banner.dataset.kind = 'unknown';
		banner.replaceChildren(el('div', { className: 'alarm', dataset: { kind: 'unknown' } },
			el('h2', null, 'Guarantee unknown: the monitor\'s state cannot be read'),
			el('p', null, 'GET /guarantee answered ' + why + '. While the alarms cannot be read, a gateway that has not read them routes every question to people with X-Route-Reason guarantee_unknown, and no group\'s guarantee can be checked.'),
			el('p', null, 'What to do: bring the review handler\'s Redis back (the gateways read the alarms every 2 seconds and route by their thresholds again once they can); then reload this page: any group in alarm shows here.')));
		banner.hidden = false;
	}

	// showAlarms shows one banner per group in alarm: which, since when,
	// and what to do.
	function showAlarms(body) {
		const alarms = body.groups.filter((g) => g.alarm);
		if (alarms.length === 0) {
			hideBanner();
			return;
		}
		const banner = $('guarantee');
		banner.dataset.kind = 'alarm';
		banner.replaceChildren(...alarms.map((g) => {
			const since = g.raised_at || '<the time you learnt of the alarm>';
			const command = 'systemone-gateway calibrate --target ' + body.target + ' --since ' + since + ' ' + location.origin + location.pathname.replace(/\/?$/, '/') + 'labels';
			const reset = 'DELETE ' + resetPath(g);
			// An escalated group's answers are the second version's to the
			// questions the first version escalated; its threshold is the
			// escalate block's, which calibrate writes beside the pin.
			const answers = g.escalated_from
				? 'the auto answers of ' + g.model + ' to the questions ' + g.escalated_from + ' escalated'
				: 'this group\'s auto answers';
			const fix = g.escalated_from
				? 'Put the new threshold in the block ' + escalateBlock(g) + ' (calibrate writes it beside the pin), reload the gateways, then reset the escalated group with the operator\'s login: '
				: 'Pin the new threshold, reload the gateways, then reset the group with the operator\'s login: ';
			return el('div', { className: 'alarm', dataset: { kind: 'alarm', model: g.model, type: g.type, org: g.org || '', escalatedFrom: g.escalated_from || '', raisedAt: g.raised_at || '' } },
				el('h2', null, 'Guarantee alarm: ' + groupName(g)),
				el('p', { className: 'raised' }, g.raised_at
					? 'Raised ' + local(g.raised_at) + ': the labels show ' + answers + ' agreeing with people less than the target ' + body.target + ' (evidence ' + Number(g.evidence).toPrecision(3) + ', at alpha ' + g.alpha + ').'
					: 'Raised at a time that was lost (the alarm was written back after Redis lost its data): ' + answers + ' agree with people less than the target ' + body.target + '.'),
				el('ol', null,
					el('li', null, 'Label the audited entries queued since the alarm, fully and as this page serves them (oldest first).'),
					el('li', null, 'Recalibrate from them only, once their labels are a correction window old: ', el('code', null, command)),
					el('li', null, fix, el('code', null, reset), '.')),
				g.raised_at ? el('button', { type: 'button', className: 'since-alarm', onclick: () => choose(g.raised_at) }, 'Show progress since this alarm') : null);
		}));
		banner.hidden = false;
	}

	let onChange = () => {};

	function choose(value) {
		state.chosen = value;
		$('since').value = value;
		onChange();
	}

	// setStartingPoints fills the Labels-from selector: all labels, and
	// each alarm's raised_at and reset's reset_at. The natural starting
	// point is the first alarm's, when there is one; a choice the reviewer
	// made stays while it is offered.
	function setStartingPoints(points) {
		const select = $('since');
		const options = [el('option', { value: '' }, 'All labels')];
		const seen = new Set(['']);
		for (const p of points) {
			if (seen.has(p.value)) continue;
			seen.add(p.value);
			options.push(el('option', { value: p.value }, p.label));
		}
		select.replaceChildren(...options);
		const natural = (points.find((p) => p.alarm) || { value: '' }).value;
		select.value = state.chosen !== null && seen.has(state.chosen) ? state.chosen : natural;
	}

	// since is the starting point /progress is asked from ('' for all).
	function since() {
		return $('since').value;
	}

	// window describes the labels' starting point in words.
	function windowWords(from) {
		if (!from) return 'over all labels';
		const g = state.guarantee && state.guarantee.groups.find((x) => x.raised_at === from);
		return g ? 'since the alarm' : 'since ' + from;
	}

	// inForce describes the threshold in force of a /progress group and
	// whether the labels of the window put it below the target.
	// For an escalated group it is the escalate block's threshold, as the
	// routes of the second answers show it, never the pin's.
	function inForce(g, target, from) {
		const f = g.in_force;
		const whose = g.escalated_from ? 'The threshold in force of the block ' + escalateBlock(g) + ', as the routes of its second answers show it. ' : '';
		if (!f) return { text: '–', warn: false, title: whose + 'No answer of this group was routed auto' };
		const shown = String(Math.round(f.threshold * 1000) / 1000);
		if (!f.n) return { text: shown, warn: false, title: whose + 'No labels at or above it ' + windowWords(from) };
		const share = f.agree / f.n;
		const warn = share < target;
		return {
			text: shown + ' (' + (100 * share).toFixed(1) + '% of ' + f.n + ')',
			warn,
			title: whose + 'Agreement at or above the threshold in force ' + windowWords(from) + ': ' + f.agree + ' of ' + f.n + (warn ? ', below the target ' + target : ''),
		};
	}

	// escalationNote explains the escalated groups of a /progress body,
	// when it has any: what they hold, where their threshold goes, and
	// the share of delta each stage is calibrated at.
	function escalationNote(body) {
		const second = body.groups.filter((g) => g.escalated_from);
		if (second.length === 0) return null;
		const half = second[0].delta !== undefined ? second[0].delta : body.delta / 2;
		return el('p', { className: 'note', id: 'escalation-note' },
			'Groups escalated from a first version hold the second version\'s answers to the questions the first version\'s answers escalated: ' +
			'a group of their own, apart from the second version\'s own answers, whose threshold goes in the escalate block beside the pin. ' +
			'Both stages of an escalated type are calibrated at half of delta (' + half + ' each), so that the type\'s auto answers of both versions together hold the target with risk ' + body.delta + '.');
	}

	// draw shows a reliability diagram per group of a /progress body.
	function draw(body, from) {
		const box = $('diagrams');
		const audit = body.method === 'weighted'
			? 'Audit: active, as the entries were drawn: less confident answers are drawn more often, so each label weighs 1/audit_p in the bars.'
			: 'Audit: uniform, as the entries were drawn: every answer had the same chance, so the bars count the labels as they are.';
		const cards = body.groups.map((g) => card(g, body.target, from));
		box.replaceChildren(...(cards.length ? [el('p', { className: 'note', id: 'audit-kind', dataset: { method: body.method || '' } }, audit), escalationNote(body), ...cards].filter((c) => c) : []));
		box.hidden = cards.length === 0;
	}

	// Geometry of a diagram: confidence on x, from the lowest tenth the
	// group's bins and thresholds reach (0.5 at the most) to 1, where
	// thresholds live; agreement on y, 0..1.
	const W = 360, H = 220, left = 40, right = 12, top = 12, bottom = 32;
	const y = (a) => top + (1 - a) * (H - top - bottom);

	function card(g, target, from) {
		const f = inForce(g, target, from);
		const supported = g.threshold !== null && g.threshold !== undefined;
		const reach = [0.5, ...(g.bins || []).map((b) => b.from)];
		if (g.in_force) reach.push(g.in_force.threshold);
		if (supported) reach.push(g.threshold);
		const lo = Math.max(0, Math.floor(Math.min(...reach) * 10) / 10);
		const x = (c) => left + (c - lo) / (1 - lo) * (W - left - right);
		const plot = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img', class: 'reliability' },
			svg('title', null, 'Agreement by confidence, ' + groupName(g)));
		// Axes and grid.
		plot.append(svg('rect', { x: left, y: top, width: W - left - right, height: H - top - bottom, fill: '#fbfcfd', stroke: '#d5dae0' }));
		for (const v of [0, 0.5, 1]) {
			const c = Math.round((lo + v * (1 - lo)) * 100) / 100;
			plot.append(svg('text', { x: x(c), y: H - bottom + 14, 'text-anchor': 'middle', class: 'tick' }, String(c)));
			plot.append(svg('text', { x: left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, String(v)));
		}
		plot.append(svg('text', { x: (left + W - right) / 2, y: H - 4, 'text-anchor': 'middle', class: 'axis' }, 'confidence'));
		// The bins: the share agreeing, and its interval (drawn last, over
		// the threshold lines).
		const intervals = [];
		for (const b of g.bins || []) {
			const bar = svg('rect', {
				x: x(b.from) + 1, y: y(b.agreement), width: Math.max(x(b.to) - x(b.from) - 2, 1), height: Math.max(y(0) - y(b.agreement), 0),
				fill: '#8fb3de', class: 'bin', 'data-from': b.from, 'data-n': b.n, 'data-agree': b.agree,
			}, svg('title', null, b.from + '–' + b.to + ': ' + b.agree + ' of ' + b.n + ' agree (' + (100 * b.agreement).toFixed(1) + '%), 95% Wilson interval ' + b.lower.toFixed(3) + '–' + b.upper.toFixed(3)));
			const mid = (x(b.from) + x(b.to)) / 2;
			plot.append(bar);
			intervals.push(svg('line', { x1: mid, x2: mid, y1: y(b.lower), y2: y(b.upper), stroke: '#1b1f24', 'stroke-width': 1.5, class: 'interval' }));
		}
		// The target, the threshold in force and the one the labels support.
		plot.append(svg('line', { x1: left, x2: W - right, y1: y(target), y2: y(target), stroke: '#0b5cad', 'stroke-dasharray': '4 3', class: 'target' }));
		if (g.in_force) {
			plot.append(svg('line', {
				x1: x(g.in_force.threshold), x2: x(g.in_force.threshold), y1: top, y2: y(0),
				stroke: f.warn ? '#d92d20' : '#5b6470', 'stroke-width': f.warn ? 3 : 2, class: 'in-force' + (f.warn ? ' warn' : ''),
			}));
		}
		if (supported) {
			plot.append(svg('line', { x1: x(g.threshold), x2: x(g.threshold), y1: top, y2: y(0), stroke: '#0b7a3b', 'stroke-width': 2, 'stroke-dasharray': '6 2', class: 'supported' }));
		}
		plot.append(...intervals);
		const legend = el('ul', { className: 'legend' },
			el('li', { className: 'target' }, 'target ' + target + ' (dashed blue)'),
			el('li', { className: 'in-force' + (f.warn ? ' warn' : ''), title: f.title },
				(g.escalated_from ? 'in force in the escalate block ' : 'in force ') + f.text + (f.warn ? ': agreement ' + windowWords(from) + ' is below the target' : '')),
			el('li', { className: 'supported' }, supported
				? 'the labels support ' + (Math.ceil(g.threshold * 10000 - 1e-9) / 10000) + (g.escalated_from ? ' for the escalate block' : '') + ' (dashed green)'
				: 'the labels support no threshold yet'));
		const escalated = Boolean(g.escalated_from);
		return el('figure', {
			className: 'diagram' + (escalated ? ' escalated' : ''),
			dataset: { model: g.model, type: g.type, question: g.question || '', org: g.org || '', stage: String(g.stage || 1), escalatedFrom: g.escalated_from || '' },
		},
			el('figcaption', null, groupName(g) + (g.question ? ', question ' + g.question : '') + ': agreement of ' +
				(escalated ? 'the second answers' : 'audited answers') + ' by confidence ' + windowWords(from) + ' (bars; lines: 95% Wilson intervals)'),
			plot, legend);
	}

	window.systemoneGuarantee = {
		load, since, draw, inForce, groupName, escalateBlock,
		// onSinceChange sets what runs when the starting point changes.
		onSinceChange(fn) {
			onChange = fn;
			$('since').addEventListener('change', () => {
				state.chosen = $('since').value;
				fn();
			});
		},
	};
})();
