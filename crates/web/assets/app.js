// switchboard's web view: channels live, history, search, a composer and
// approvals, over the JSON API in docs/web.md. Message text only ever
// reaches the page as text nodes: nothing from a message is parsed as HTML.
'use strict';

const NAME_KEY = 'switchboard.name';
const CHANNEL_KEY = 'switchboard.channel';
const PAGE = 100;

const $ = (id) => document.getElementById(id);

const state = {
  viewer: localStorage.getItem(NAME_KEY) || '',
  channel: null,          // the open channel's name
  channels: [],           // summaries from /api/channels
  oldest: null,           // seq of the oldest message shown
  newestShown: 0,         // seq of the newest message shown
  atNewest: true,         // the open channel shows its newest page
  loading: null,          // live messages of the channel whose page is loading
  view: 0,                // counts openChannel calls: a page that loaded for an earlier view is dropped
  fetchingNewer: false,   // a page after the newest shown is on its way
  live: [],               // live messages waiting for the next frame
  seen: new Set(),        // ids of the messages shown
  members: new Set(),     // nicks in the open channel's member list
  approvals: null,        // the approvals channel, if any
  waiting: 0,             // approval requests waiting
  lastId: 0,              // the newest message id the stream has given
  instance: null,         // the server process the page loaded from
  stream: null,
  refreshTimer: 0,
  readTimer: 0,
};

// --- the API -------------------------------------------------------------

class Unauthorized extends Error {}

async function api(path, body) {
  const options = { credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    options.method = 'POST';
    options.headers['Content-Type'] = 'application/json';
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch {
    throw new Error('switchboard cannot be reached: is it running? Trying again when it is back.');
  }
  if (response.status === 401) throw new Unauthorized();
  if (response.status === 204) return null;
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  return q.toString();
}

function status(text, error) {
  const s = $('status');
  s.textContent = text || '';
  s.classList.toggle('error', Boolean(error));
}

// --- rendering (text only) ------------------------------------------------

const URL_RE = /\bhttps?:\/\/[^\s<>"'`]+[^\s<>"'`.,;:!?)\]}]/g;

function escapeRegExp(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// Nick characters, as IRC allows them: a mention is the nick as a whole word.
const NICK_CHAR = '[\\p{L}\\p{N}\\-_\\[\\]{}\\\\|^`]';

function mentionPattern(nick) {
  if (!nick) return null;
  return new RegExp(`(?<!${NICK_CHAR})${escapeRegExp(nick)}(?!${NICK_CHAR})`, 'giu');
}

// Appends `text` to `parent` as text nodes, links (http and https only) and,
// when `marked`, marked mentions of the viewer.
function appendText(parent, text, marked) {
  const mention = marked ? mentionPattern(state.viewer) : null;
  let last = 0;
  for (const match of text.matchAll(URL_RE)) {
    appendMentions(parent, text.slice(last, match.index), mention);
    const a = document.createElement('a');
    a.href = match[0];
    a.textContent = match[0];
    a.rel = 'noopener noreferrer nofollow';
    a.target = '_blank';
    parent.append(a);
    last = match.index + match[0].length;
  }
  appendMentions(parent, text.slice(last), mention);
}

function appendMentions(parent, text, mention) {
  if (!text) return;
  if (!mention) {
    parent.append(document.createTextNode(text));
    return;
  }
  let last = 0;
  for (const match of text.matchAll(mention)) {
    parent.append(document.createTextNode(text.slice(last, match.index)));
    const mark = document.createElement('mark');
    mark.textContent = match[0];
    parent.append(mark);
    last = match.index + match[0].length;
  }
  parent.append(document.createTextNode(text.slice(last)));
}

function mentions(text) {
  const pattern = mentionPattern(state.viewer);
  return pattern ? pattern.test(text) : false;
}

function clock(iso) {
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

function messageItem(m) {
  const li = document.createElement('li');
  li.dataset.id = m.id;
  li.dataset.seq = m.seq;
  li.className = `from-${m.kind}`;
  if (m.kind === 'system') li.classList.add('system');
  // switchboard's notices and one's own lines never mention one.
  const mentioned = m.kind !== 'system' && m.nick.toLowerCase() !== state.viewer.toLowerCase() && mentions(m.text);
  if (mentioned) li.classList.add('mentioned');
  const time = document.createElement('time');
  time.dateTime = m.time;
  time.textContent = clock(m.time);
  time.title = new Date(m.time).toLocaleString();
  const nick = document.createElement('bdi');
  nick.className = `nick kind-${m.kind}`;
  nick.textContent = m.nick;
  nick.title = m.kind === 'agent' ? 'an agent' : m.kind === 'human' ? 'a person' : m.kind;
  const text = document.createElement('bdi');
  text.className = 'text';
  text.dir = 'auto';
  appendText(text, m.text, mentioned);
  li.append(time, nick, text);
  return li;
}

// --- the open channel -------------------------------------------------------

function log() { return $('log'); }

function isAtBottom() {
  const l = log();
  return l.scrollHeight - l.scrollTop - l.clientHeight < 40;
}

function scrollToBottom() {
  const l = log();
  l.scrollTop = l.scrollHeight;
  $('newest').hidden = true;
}

function showMessages(messages, { prepend = false } = {}) {
  const list = $('messages');
  const items = [];
  for (const m of messages) {
    if (state.seen.has(m.id)) continue;
    state.seen.add(m.id);
    items.push(messageItem(m));
    if (state.oldest === null || m.seq < state.oldest) state.oldest = m.seq;
    if (m.seq > state.newestShown) state.newestShown = m.seq;
  }
  if (prepend) {
    const l = log();
    const before = l.scrollHeight;
    list.prepend(...items);
    l.scrollTop += l.scrollHeight - before;
  } else {
    list.append(...items);
  }
}

async function openChannel(name, { around } = {}) {
  state.view += 1;
  state.fetchingNewer = false;
  state.channel = name;
  state.oldest = null;
  state.newestShown = 0;
  state.seen = new Set();
  // Live messages that arrive meanwhile wait for the page, and follow it.
  state.atNewest = false;
  state.loading = [];
  $('messages').replaceChildren();
  // Another channel's members must not stand for this one's while the
  // server cannot be asked.
  state.members = new Set();
  $('member-list').replaceChildren();
  $('channel-title').textContent = name;
  setTitle();
  // A jump to a search result is a step Back returns from.
  if (around) {
    history.pushState({ around }, '', `#${encodeURIComponent(name)}`);
  } else {
    history.replaceState(null, '', `#${encodeURIComponent(name)}`);
  }
  localStorage.setItem(CHANNEL_KEY, name);
  enableComposer(true);
  renderChannels();
  let data;
  try {
    data = await api(around
      ? `/api/around?${query({ channel: name, seq: around, context: 25 })}`
      : `/api/messages?${query({ channel: name, limit: PAGE, viewer: state.viewer })}`);
  } catch (e) {
    if (state.channel === name) state.loading = null;
    throw e;
  }
  if (state.channel !== name) return;
  const early = state.loading;
  state.loading = null;
  // A page around a search result shows no live messages.
  state.atNewest = !around;
  showMessages(data.messages);
  if (state.atNewest) showMessages(early);
  $('older').hidden = !data.more;
  if (around) {
    const target = $('messages').querySelector(`li[data-seq="${around}"]`);
    if (target) {
      target.classList.add('target');
      target.tabIndex = -1;
      target.scrollIntoView({ block: 'center' });
      target.focus();
    }
    $('newest').hidden = false;
    // A page too short to scroll cannot be scrolled down: load on at once.
    if (isAtBottom()) loadNewer().catch(fail);
  } else {
    scrollToBottom();
  }
  // Marks for tests and the benchmark: the channel's page is in the DOM
  // (ready), and the frame showing it has been painted (painted).
  document.body.dataset.channel = name;
  document.body.dataset.ready = String(performance.now());
  requestAnimationFrame(() => setTimeout(() => {
    if (state.channel === name) document.body.dataset.painted = String(performance.now());
  }));
  refreshMembers();
  refreshChannels();
}

async function loadOlder() {
  if (!state.channel || state.oldest === null || state.oldest <= 1) return;
  const name = state.channel;
  const data = await api(`/api/messages?${query({ channel: name, before: state.oldest, limit: PAGE })}`);
  if (state.channel !== name) return;
  showMessages(data.messages, { prepend: true });
  $('older').hidden = !data.more;
}

// Scrolling down a page that is not the newest (a search result's) loads
// the pages after it; the last of them is the newest, and live again.
async function loadNewer() {
  if (!state.channel || state.atNewest || state.loading || state.fetchingNewer) return;
  const { channel: name, view } = state;
  state.fetchingNewer = true;
  // Live messages that arrive meanwhile follow the page if it is the newest.
  state.loading = [];
  let data;
  try {
    data = await api(`/api/messages?${query({ channel: name, after: state.newestShown, limit: PAGE })}`);
  } finally {
    if (state.view === view) {
      state.fetchingNewer = false;
      if (!data) state.loading = null;
    }
  }
  if (state.view !== view) return;
  const early = state.loading;
  state.loading = null;
  showMessages(data.messages);
  if (!data.newer) {
    state.atNewest = true;
    showMessages(early);
    $('newest').hidden = isAtBottom();
    markRead();
  } else if (isAtBottom()) {
    await loadNewer();
  }
}

async function jumpToNewest() {
  if (!state.atNewest) {
    await openChannel(state.channel);
  } else {
    scrollToBottom();
    markRead();
  }
  // The button hides itself: the keyboard goes on from the messages.
  log().focus();
}

function markRead() {
  if (!state.viewer || !state.channel || !state.atNewest || !state.newestShown) return;
  clearTimeout(state.readTimer);
  const channel = state.channel;
  const seq = state.newestShown;
  state.readTimer = setTimeout(() => {
    api('/api/read', { channel, seq, viewer: state.viewer })
      .then(refreshChannels)
      .catch(() => {});
  }, 300);
}

function enableComposer(on) {
  $('text').disabled = !on;
  $('composer').querySelector('button').disabled = !on;
}

// --- channels, members, approvals -------------------------------------------------

async function refreshChannels() {
  const data = await api(`/api/channels?${query({ viewer: state.viewer })}`);
  state.channels = data.channels;
  renderChannels();
  if (!state.channel && state.channels.length) {
    // The address names the channel; without one, the one last read here.
    let wanted = decodeURIComponent(location.hash.slice(1)) || localStorage.getItem(CHANNEL_KEY) || '';
    if (wanted && !wanted.startsWith('#')) wanted = `#${wanted}`;
    const found = state.channels.find((c) => c.channel.toLowerCase() === wanted.toLowerCase());
    await openChannel(found ? found.channel : state.channels[0].channel);
  }
}

// At most one refresh each 250 ms, however steady the traffic.
function scheduleRefresh() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => {
    state.refreshTimer = 0;
    refreshChannels().catch(() => {});
    refreshApprovals().catch(() => {});
  }, 250);
}

function renderChannels() {
  const list = $('channels');
  const items = state.channels.map((c) => {
    const li = document.createElement('li');
    const b = document.createElement('button');
    b.type = 'button';
    const open = c.channel === state.channel;
    b.setAttribute('aria-current', String(open));
    const name = document.createElement('span');
    name.textContent = c.channel;
    if (c.unread > 0 && !open) name.className = 'unread-name';
    b.append(name);
    const label = [c.channel];
    if (c.mentions > 0) {
      const badge = document.createElement('span');
      badge.className = 'badge mentions';
      badge.textContent = `@${c.mentions}`;
      b.append(badge);
      label.push(`${c.mentions} mention${c.mentions === 1 ? '' : 's'}`);
    }
    if (c.unread > 0) {
      const badge = document.createElement('span');
      badge.className = 'badge unread';
      badge.textContent = String(c.unread);
      b.append(badge);
      label.push(`${c.unread} unread`);
    }
    b.setAttribute('aria-label', label.join(', '));
    b.dataset.channel = c.channel;
    b.addEventListener('click', () => openChannel(c.channel).catch(fail));
    li.append(b);
    return li;
  });
  // Redrawing the list must not drop the keyboard's place in it.
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.channel : null;
  list.replaceChildren(...items);
  if (focused) list.querySelector(`button[data-channel="${CSS.escape(focused)}"]`)?.focus();
}

/// Opens or closes the members panel (on a phone it covers the page), with
/// the keyboard in it while open and back on its button after.
function showMembers(open) {
  $('members').classList.toggle('open', open);
  $('members-toggle').setAttribute('aria-expanded', String(open));
  if (open) $('members-close').focus();
  else $('members-toggle').focus();
}

async function refreshMembers() {
  if (!state.channel) return;
  const name = state.channel;
  const data = await api(`/api/members?${query({ channel: name })}`).catch(() => ({ members: [] }));
  if (state.channel !== name) return;
  const items = data.members.map((m) => {
    const li = document.createElement('li');
    const nick = document.createElement('bdi');
    nick.textContent = m.nick;
    const kind = document.createElement('span');
    kind.className = `kind kind-${m.kind}`;
    kind.textContent = m.kind === 'agent' ? 'agent' : m.kind === 'human' ? 'person' : m.kind === 'system' ? 'switchboard' : '';
    li.append(nick, kind);
    return li;
  });
  state.members = new Set(data.members.map((m) => m.nick));
  $('member-list').replaceChildren(...items);
}

async function refreshApprovals() {
  if (!state.approvals) return;
  const data = await api('/api/approvals');
  const items = data.pending.map((p) => {
    const li = document.createElement('li');
    li.dataset.id = p.id;
    const what = document.createElement('p');
    const who = document.createElement('strong');
    who.textContent = p.agent;
    what.append(who, document.createTextNode(` wants to run ${p.tool}: ${p.description}`));
    const preview = document.createElement('code');
    preview.textContent = p.preview;
    const actions = document.createElement('div');
    actions.className = 'actions';
    for (const [word, label, cls] of [['yes', 'Allow', 'allow'], ['no', 'Deny', 'deny']]) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = cls;
      b.textContent = label;
      b.setAttribute('aria-label', `${label} ${p.agent} running ${p.tool} (${p.id})`);
      b.addEventListener('click', () => answer(word, p.id).catch(fail));
      actions.append(b);
    }
    li.append(what, preview, actions);
    return li;
  });
  $('approval-list').replaceChildren(...items);
  $('approvals').hidden = items.length === 0;
  // The list may be below the fold of a long channel list: the header and
  // the tab's title say that requests wait.
  const badge = $('approvals-badge');
  badge.hidden = items.length === 0;
  badge.textContent = items.length === 1 ? '1 approval waiting' : `${items.length} approvals waiting`;
  state.waiting = items.length;
  setTitle();
}

// The tab's title: requests waiting, the open channel, switchboard.
function setTitle() {
  const waiting = state.waiting ? `(${state.waiting}) ` : '';
  document.title = `${waiting}${state.channel ? `${state.channel} — ` : ''}switchboard`;
}

function showApprovals() {
  $('approvals').scrollIntoView({ block: 'nearest' });
  $('approval-list').querySelector('button')?.focus();
}

async function answer(word, id) {
  const card = $('approval-list').querySelector(`li[data-id="${CSS.escape(id)}"]`);
  // One answer per request: a double click must not post two.
  card?.querySelectorAll('button').forEach((b) => { b.disabled = true; });
  try {
    await api('/api/send', { channel: state.approvals, text: `${word} ${id}`, nick: state.viewer });
  } catch (e) {
    card?.querySelectorAll('button').forEach((b) => { b.disabled = false; });
    throw e;
  }
  // Settled a moment after the reply is stored; a request still waiting
  // then was not answered: the approvals channel says why.
  for (let i = 0; i < 10; i++) {
    await refreshApprovals();
    if (!$('approval-list').querySelector(`li[data-id="${CSS.escape(id)}"]`)) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const still = $('approval-list').querySelector(`li[data-id="${CSS.escape(id)}"]`);
  if (still) {
    const data = await api(`/api/messages?${query({ channel: state.approvals, limit: 20 })}`);
    const why = data.messages.reverse().find((m) => m.kind === 'system' && m.text.includes(id) && m.text.startsWith(`${state.viewer}:`));
    status(why ? why.text : `Your answer to ${id} was not taken; see ${state.approvals}.`, true);
  }
  // The keyboard goes on to the next request, or back to the messages.
  const next = $('approval-list').querySelector('button');
  (next || log()).focus();
}

// --- the live stream ---------------------------------------------------------

function startStream(since) {
  if (state.stream) state.stream.close();
  const source = new EventSource(`/api/stream?${query({ since, instance: state.instance })}`);
  state.stream = source;
  source.addEventListener('message', (e) => {
    const m = JSON.parse(e.data);
    state.lastId = Math.max(state.lastId, m.id);
    onMessage(m);
  });
  // The server restarted and may hold another history (an in-memory one,
  // or a file restored from a backup): what the page shows is reloaded.
  source.addEventListener('reset', () => {
    source.close();
    state.channel = null;
    start();
  });
  source.addEventListener('open', () => {
    document.body.dataset.live = 'true';
    status('');
  });
  source.addEventListener('error', () => {
    document.body.dataset.live = 'false';
    status('Reconnecting…');
    // A refused stream (a revoked token: 401; the server busy: 503) is not
    // retried by the browser, as a dropped one is. A revoked token asks for
    // another; otherwise the stream is tried again shortly.
    if (source.readyState === EventSource.CLOSED) {
      const retry = () => setTimeout(() => {
        if (state.stream === source) startStream(state.lastId);
      }, 5000);
      refreshChannels().then(retry, (e) => {
        fail(e);
        if (!(e instanceof Unauthorized)) retry();
      });
    }
  });
}

function onMessage(m) {
  if (m.channel === state.channel) {
    if (state.loading) {
      state.loading.push(m);
    } else if (state.atNewest) {
      // Shown once a frame, all together: a layout per message would freeze
      // the page under a burst of a thousand lines.
      if (!state.live.length) requestAnimationFrame(showLive);
      state.live.push(m);
    }
    // Someone new speaking here is a member now (asked once per nick).
    if (!state.members.has(m.nick)) {
      state.members.add(m.nick);
      refreshMembers().catch(() => {});
    }
  }
  if (!state.channels.some((c) => c.channel === m.channel) || m.channel !== state.channel) {
    scheduleRefresh();
  }
  if (state.approvals && m.channel.toLowerCase() === state.approvals.toLowerCase()) {
    scheduleRefresh();
  }
}

function showLive() {
  const batch = state.live.filter((m) => m.channel === state.channel);
  state.live = [];
  if (!state.atNewest || !batch.length) return;
  const follow = isAtBottom();
  showMessages(batch);
  if (follow) {
    scrollToBottom();
    markRead();
  } else {
    $('newest').hidden = false;
  }
}

// --- search -----------------------------------------------------------------------

async function search(q) {
  const data = await api(`/api/search?${query({ q })}`);
  const items = data.messages.map((m) => {
    const li = document.createElement('li');
    const b = document.createElement('button');
    b.type = 'button';
    const where = document.createElement('span');
    where.textContent = `${m.channel} ${new Date(m.time).toLocaleString()} `;
    const nick = document.createElement('bdi');
    nick.textContent = `<${m.nick}> `;
    const text = document.createElement('bdi');
    text.dir = 'auto';
    appendMentions(text, m.text, null);
    b.append(where, nick, text);
    b.dataset.channel = m.channel;
    b.dataset.seq = m.seq;
    b.addEventListener('click', () => {
      $('results').hidden = true;
      openChannel(m.channel, { around: m.seq }).catch(fail);
    });
    li.append(b);
    return li;
  });
  if (!items.length) {
    const li = document.createElement('li');
    li.textContent = `Nothing matches “${q}”.`;
    items.push(li);
  }
  $('result-list').replaceChildren(...items);
  $('results').hidden = false;
  const first = $('result-list').querySelector('button');
  if (first) first.focus();
}

// --- who you are, and the token -------------------------------------------------

function askName() {
  const dialog = $('name-dialog');
  $('name').value = state.viewer;
  $('name-error').textContent = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.onclose = () => resolve(state.viewer);
  });
}

async function setName(event) {
  event.preventDefault();
  const name = $('name').value.trim();
  if (!name) {
    $('name-error').textContent = 'Give the name you go by here (your nick).';
    return;
  }
  // The server checks the nick: ask for the channel list as that viewer.
  try {
    await api(`/api/channels?${query({ viewer: name })}`);
  } catch (e) {
    $('name-error').textContent = e.message;
    return;
  }
  state.viewer = name;
  localStorage.setItem(NAME_KEY, name);
  $('who').textContent = name;
  $('name-dialog').close();
}

function askToken() {
  const dialog = $('token-dialog');
  $('token-error').textContent = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.onclose = resolve;
  });
}

async function sendToken(event) {
  event.preventDefault();
  try {
    await api('/api/login', { token: $('token').value });
  } catch (e) {
    $('token-error').textContent = e instanceof Unauthorized ? 'That is not the token.' : e.message;
    return;
  }
  $('token').value = '';
  $('token-dialog').close();
}

// --- sending --------------------------------------------------------------------

async function send(event) {
  event.preventDefault();
  const box = $('text');
  const text = box.value;
  if (!text.trim() || !state.channel) return;
  box.disabled = true;
  try {
    await api('/api/send', { channel: state.channel, text, nick: state.viewer });
    box.value = '';
    status('');
    // Sent from an older page (a search result): show it where it went.
    if (!state.atNewest) await openChannel(state.channel);
  } catch (e) {
    fail(e);
  } finally {
    box.disabled = false;
    box.focus();
  }
}

function fail(e) {
  if (e instanceof Unauthorized) {
    if (!$('token-dialog').open) askToken().then(start);
  } else {
    status(e.message, true);
  }
}

// --- start ------------------------------------------------------------------------

async function start() {
  try {
    const session = await api('/api/session');
    state.instance = session.instance;
    state.approvals = session.approvals_channel;
    // A token bound to a nick speaks only as that nick.
    if (session.nick) {
      state.viewer = session.nick;
      localStorage.setItem(NAME_KEY, session.nick);
      // The token speaks as its nick only: no other name to choose.
      $('who').disabled = true;
      $('who').setAttribute('aria-label', `You are ${session.nick} (your token's nick)`);
    }
    // The stream starts after the newest message now: what the pages load
    // below and what the stream brings may overlap (shown once), never
    // leave a gap.
    state.lastId = session.newest_id;
    startStream(state.lastId);
    if (!state.viewer) {
      // What is there shows behind the question; reading as nobody marks
      // nothing read.
      await refreshChannels();
      await askName();
    }
    $('who').textContent = state.viewer;
    await refreshChannels();
    await refreshApprovals();
  } catch (e) {
    fail(e);
  }
}

function wire() {
  $('composer').addEventListener('submit', send);
  $('text').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('older').addEventListener('click', () => loadOlder().catch(fail));
  $('newest').addEventListener('click', () => jumpToNewest().catch(fail));
  log().addEventListener('scroll', () => {
    if (log().scrollTop < 40 && !$('older').hidden) loadOlder().catch(fail);
    if (isAtBottom() && !state.atNewest) loadNewer().catch(fail);
    if (isAtBottom()) {
      $('newest').hidden = state.atNewest;
      markRead();
    }
  });
  $('search').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = $('search-q').value.trim();
    // A failed search leaves no earlier results on show; a good one, no earlier error.
    if (q) {
      search(q).then(() => status('')).catch((error) => {
        $('results').hidden = true;
        fail(error);
      });
    }
  });
  $('results-close').addEventListener('click', () => { $('results').hidden = true; });
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape') return;
    if ($('members').classList.contains('open')) showMembers(false);
    else if (!$('results').hidden) $('results').hidden = true;
  });
  $('who').addEventListener('click', () => askName().then(() => refreshChannels()).catch(fail));
  $('name-form').addEventListener('submit', (e) => setName(e).catch(fail));
  // Without a name nothing can be sent: the question stays until answered
  // (Chromium lets a second Escape close a dialog whatever its cancel
  // handler says, so it is opened again).
  $('name-dialog').addEventListener('cancel', (e) => {
    if (!state.viewer) e.preventDefault();
  });
  $('name-dialog').addEventListener('close', () => {
    if (!state.viewer) $('name-dialog').showModal();
  });
  $('skip').addEventListener('click', (e) => {
    // Focus the box without changing the address (it names the channel).
    e.preventDefault();
    $('text').focus();
  });
  $('token-form').addEventListener('submit', (e) => sendToken(e).catch(fail));
  $('approvals-badge').addEventListener('click', showApprovals);
  $('members-toggle').addEventListener('click', () => showMembers(!$('members').classList.contains('open')));
  $('members-close').addEventListener('click', () => showMembers(false));
  // On a phone the panel covers the page: a tap beside it closes it too.
  $('main').addEventListener('click', (e) => {
    if ($('members').classList.contains('open') && e.target !== $('members-toggle')) showMembers(false);
  });
  // Channels made without a message (create_channel) and expiring
  // requests show up this way; messages come by the stream.
  setInterval(() => {
    if ($('token-dialog').open) return;
    refreshChannels().catch(() => {});
    refreshApprovals().catch(fail);
  }, 10000);
  // A name chosen in another tab is this tab's too.
  window.addEventListener('storage', (e) => {
    if (e.key !== NAME_KEY || !e.newValue || $('who').disabled) return;
    state.viewer = e.newValue;
    $('who').textContent = e.newValue;
    refreshChannels().catch(() => {});
  });
  // A page kept in the back/forward cache must not hold its stream's
  // connection: browsers allow only six per host over HTTP/1.1.
  // Back from a search result: the channel as it was, at its newest.
  window.addEventListener('popstate', () => {
    const name = decodeURIComponent(location.hash.slice(1));
    if (name && state.channels.some((c) => c.channel === name)) openChannel(name).catch(fail);
  });
  window.addEventListener('pagehide', () => state.stream?.close());
  window.addEventListener('pageshow', (e) => {
    if (e.persisted) {
      startStream(state.lastId);
      scheduleRefresh();
    }
  });
}

wire();
start();
