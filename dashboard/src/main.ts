import {
  admin,
  adminResult,
  adminToken,
  ApiError,
  checkToken,
  type Feed,
  onUnauthorised,
  type SearchKey,
  setAdminToken,
} from './api.ts';
import { errorBox, h, replace, toast } from './dom.ts';
import {
  domainsView,
  type FeedPage,
  generalView,
  importsView,
  keysView,
  productsView,
  usageView,
} from './feed-views.ts';
import { tryItView } from './try-it.ts';

/**
 * The dashboard: a hash-routed single page over the admin API.
 *   #/                      feeds (list, create)
 *   #/feeds/<id>/<tab>      general | keys | domains | usage | imports | products | try
 */
const main = document.getElementById('main')!;
const topnav = document.getElementById('topnav')!;
const enc = encodeURIComponent;

const TABS = [
  { id: 'general', label: 'General', group: 'Settings' },
  { id: 'keys', label: 'API Keys', group: 'Settings' },
  { id: 'domains', label: 'Domains', group: 'Settings' },
  { id: 'usage', label: 'Usage', group: '' },
  { id: 'imports', label: 'Imports', group: '' },
  { id: 'products', label: 'Products', group: '' },
  { id: 'try', label: 'Try it', group: '' },
] as const;
type TabId = (typeof TABS)[number]['id'];

/** Why the sign-in page shows: kept until the next sign-in, as the page may be drawn twice meanwhile. */
let signInMessage: HTMLElement | null = null;
onUnauthorised(() => {
  signInMessage = h(
    'div',
    { class: 'alert error', role: 'alert' },
    h('p', {}, 'The admin token was refused; sign in again.'),
  );
  // Drawn now and once more on the hashchange (from a feed's page, or the bare URL): both show the message.
  location.hash = '#/';
  void render();
});

function setTitle(text: string) {
  document.title = `${text} — Visual product search`;
}

function focusMain() {
  const heading = main.querySelector('h1');
  (heading instanceof HTMLElement ? heading : main).focus({ preventScroll: false });
}

function renderNav() {
  if (!adminToken()) {
    replace(topnav, h('a', { href: '/docs' }, 'API reference'));
    return;
  }
  replace(
    topnav,
    h('a', { href: '#/' }, 'Feeds'),
    h('a', { href: '/docs' }, 'API reference'),
    h(
      'button',
      {
        type: 'button',
        class: 'link',
        onclick: () => {
          setAdminToken(null);
          location.hash = '#/';
          void render();
        },
      },
      'Sign out',
    ),
  );
}

function signInView(): HTMLElement {
  const status = h('div');
  if (signInMessage) status.append(signInMessage);
  const input = h('input', {
    id: 'admin-token',
    name: 'token',
    type: 'password',
    autocomplete: 'off',
    required: true,
    spellcheck: 'false',
    'aria-describedby': 'token-help',
  });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h(
    'form',
    { class: 'card signin stack', 'aria-labelledby': 'signin-h' },
    h('h1', { id: 'signin-h', tabindex: '-1' }, 'Sign in'),
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'admin-token' }, 'Admin token'),
      input,
      h(
        'p',
        { id: 'token-help', class: 'help' },
        'npm start prints it ("Admin token adm_…"); it is also in the data folder as admin-token. It stays in this browser tab only.',
      ),
    ),
    h('div', { class: 'actions' }, submit),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    signInMessage = null;
    const token = input.value.trim();
    if (!token) {
      replace(status, errorBox(new Error('Enter the admin token.')));
      input.focus();
      return;
    }
    submit.disabled = true;
    try {
      await checkToken(token);
      setAdminToken(token);
      toast('Signed in');
      await render();
    } catch (error) {
      replace(status, errorBox(error, 'Sign-in failed'));
      input.select();
    } finally {
      submit.disabled = false;
    }
  });
  setTitle('Sign in');
  return form;
}

async function feedsView(): Promise<HTMLElement> {
  setTitle('Feeds');
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading feeds…'));
  const status = h('div');
  const name = h('input', { id: 'new-feed-name', required: true, maxlength: 200, placeholder: 'My shop' });
  const id = h('input', {
    id: 'new-feed-id',
    pattern: '[a-z0-9][a-z0-9_-]{2,63}',
    placeholder: 'generated when empty',
    'aria-describedby': 'feed-id-help',
  });
  const plan = h(
    'select',
    { id: 'new-feed-plan' },
    ['free', 'pro', 'enterprise'].map((p) => h('option', { value: p }, p)),
  );
  const form = h(
    'form',
    { class: 'inline-form', novalidate: true, 'aria-labelledby': 'create-h' },
    h('div', { class: 'field' }, h('label', { for: 'new-feed-name' }, 'Name'), name),
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'new-feed-id' }, 'Feed id (optional)'),
      id,
      h('p', { id: 'feed-id-help', class: 'help' }, '3–64 characters: a–z, 0–9, _ and -'),
    ),
    h('div', { class: 'field' }, h('label', { for: 'new-feed-plan' }, 'Plan'), plan),
    h('button', { type: 'submit', class: 'primary' }, 'Create feed'),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!name.value.trim()) {
      replace(status, errorBox(new Error('Enter a name for the feed.')));
      name.focus();
      return;
    }
    const body: Record<string, unknown> = { name: name.value.trim(), plan: plan.value };
    if (id.value.trim()) body.feedId = id.value.trim();
    // No hourlyLimit: an enterprise feed starts on the plan's default (PLAN_LIMIT_ENTERPRISE), not a pinned
    // custom limit; General sets its own.
    try {
      const feed = await admin<Feed>('POST', '/feeds', body);
      toast(`Feed ${feed.name} created`);
      location.hash = `#/feeds/${enc(feed.feedId)}/keys`;
    } catch (error) {
      replace(status, errorBox(error, 'Could not create the feed'));
    }
  });
  try {
    const { feeds } = await admin<{ feeds: Feed[] }>('GET', '/feeds');
    replace(
      list,
      feeds.length === 0
        ? h('p', { class: 'muted' }, 'No feeds yet: create one below.')
        : h(
            'table',
            { class: 'table feeds' },
            h('caption', { class: 'visually-hidden' }, 'Feeds'),
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ['Name', 'Feed id', 'Plan', 'Hourly limit', 'Domains'].map((c) =>
                  h('th', { scope: 'col' }, c),
                ),
              ),
            ),
            h(
              'tbody',
              {},
              feeds.map((feed) =>
                h(
                  'tr',
                  { 'data-feed-id': feed.feedId },
                  h('td', {}, h('a', { href: `#/feeds/${enc(feed.feedId)}/general` }, feed.name)),
                  h('td', {}, h('code', {}, feed.feedId)),
                  h('td', {}, feed.plan),
                  h('td', {}, feed.hourlyLimit.toLocaleString()),
                  h('td', {}, feed.domains.length === 0 ? 'any' : feed.domains.join(', ')),
                ),
              ),
            ),
          ),
    );
  } catch (error) {
    replace(list, errorBox(error, 'Could not load the feeds'));
  }
  return h(
    'div',
    {},
    h('h1', { tabindex: '-1' }, 'Feeds'),
    list,
    h('section', { class: 'card' }, h('h2', { id: 'create-h' }, 'Create a feed'), form, status),
  );
}

async function feedView(feedId: string, tab: TabId): Promise<HTMLElement> {
  let feed: Feed;
  let version: string | undefined;
  try {
    ({ body: feed, etag: version } = await adminResult<Feed>('GET', `/feeds/${enc(feedId)}`));
  } catch (error) {
    setTitle('Feed');
    return h(
      'div',
      {},
      h('h1', { tabindex: '-1' }, 'Feed'),
      errorBox(error, `Could not load feed ${feedId}`),
      h('p', {}, h('a', { href: '#/' }, 'Back to the feeds')),
    );
  }
  const current = TABS.find((t) => t.id === tab) ?? TABS[0];
  setTitle(`${current.label} · ${feed.name}`);
  const page: FeedPage = { feed, version, refresh: () => void render() };
  let content: HTMLElement;
  try {
    if (tab === 'keys' || tab === 'try') {
      const { keys } = await admin<{ keys: SearchKey[] }>('GET', `/feeds/${enc(feedId)}/keys`);
      if (tab === 'keys') {
        const createdId = sessionStorage.getItem(`vps.created.${feedId}`);
        sessionStorage.removeItem(`vps.created.${feedId}`);
        content = keysView(
          page,
          keys,
          keys.find((k) => k.searchId === createdId),
        );
      } else {
        content = tryItView(feed.domains, keys, async () => {
          await admin<SearchKey>('POST', `/feeds/${enc(feedId)}/keys`, { name: 'dashboard test' });
          void render();
        });
      }
    } else if (tab === 'domains') content = domainsView(page);
    else if (tab === 'usage') content = usageView(page);
    else if (tab === 'imports') content = importsView(page);
    else if (tab === 'products') content = productsView(page);
    else content = generalView(page);
  } catch (error) {
    content = errorBox(error);
  }
  const tabLink = (t: (typeof TABS)[number]) =>
    h(
      'a',
      {
        href: `#/feeds/${enc(feedId)}/${t.id}`,
        class: 'tab',
        'aria-current': t.id === current.id ? 'page' : undefined,
      },
      t.label,
    );
  return h(
    'div',
    {},
    h(
      'nav',
      { class: 'breadcrumbs', 'aria-label': 'Breadcrumb' },
      h('a', { href: '#/' }, 'Feeds'),
      ' / ',
      feed.name,
      current.group ? ` / ${current.group}` : '',
      ` / ${current.label}`,
    ),
    h('h1', { tabindex: '-1' }, feed.name, ' ', h('span', { class: 'badge plan' }, feed.plan)),
    h(
      'nav',
      { class: 'tabs', 'aria-label': 'Feed sections' },
      h(
        'span',
        { class: 'tab-group' },
        h('span', { class: 'tab-group-label' }, 'Settings'),
        TABS.filter((t) => t.group === 'Settings').map(tabLink),
      ),
      TABS.filter((t) => !t.group).map(tabLink),
    ),
    content,
  );
}

let rendering = 0;
async function render(): Promise<void> {
  const ticket = ++rendering;
  renderNav();
  let view: HTMLElement;
  if (!adminToken()) view = signInView();
  else {
    const match = /^#\/feeds\/([^/]+)(?:\/([a-z]+))?/.exec(location.hash);
    try {
      view = match
        ? await feedView(decodeURIComponent(match[1]!), (match[2] ?? 'general') as TabId)
        : await feedsView();
    } catch (error) {
      view = error instanceof ApiError && error.code === 'unauthorized' ? signInView() : errorBox(error);
    }
  }
  if (ticket !== rendering) return;
  renderNav();
  replace(main, view);
  focusMain();
}

window.addEventListener('hashchange', () => void render());
void render();
