import {
  admin,
  adminResult,
  ApiError,
  type Feed,
  type ImportProblem,
  type ImportStatus,
  type Product,
  type SearchKey,
  type UsageReport,
} from './api.ts';
import { DOMAIN_PATTERN } from '../../lib/domain/domain-pattern.ts';
import { ENDPOINT_COLOURS, RATE_LIMITED_COLOUR, usageChart } from './chart.ts';
import { copyText, errorBox, formatDate, h, productCard, replace, toast, unavailableBox } from './dom.ts';

/** The per-feed pages: general settings, API keys, domains, usage, imports and products. */

export interface FeedPage {
  feed: Feed;
  /** The feed's ETag as loaded: changes are saved with it as If-Match (412 when another tab saved first). */
  version: string | undefined;
  /** Re-renders the current page after a change. */
  refresh(): void;
}

const mask = (id: string) => `${id.slice(0, 8)}…${id.slice(-4)}`;

/** A search id's name in usage, revoked ones marked (keys are revoked, not deleted: every one is listed). */
function keyLabel(key: SearchKey | undefined): string {
  if (!key) return '—';
  return key.revokedAt ? `${key.name} (revoked)` : key.name;
}

/** Where this tab keeps the id of the last import it started on a feed. */
const lastImportKey = (feedId: string) => `vps.import.${feedId}`;
const enc = encodeURIComponent;

function busy(button: HTMLButtonElement, on: boolean, label?: string) {
  button.disabled = on;
  button.setAttribute('aria-busy', String(on));
  if (label) button.textContent = label;
}

// ---- Settings > General ----

export function generalView({ feed, version, refresh }: FeedPage): HTMLElement {
  const status = h('div');
  const name = h('input', {
    id: 'feed-name',
    name: 'name',
    value: feed.name,
    required: true,
    maxlength: 200,
  });
  const plan = h(
    'select',
    { id: 'feed-plan', name: 'plan' },
    (['free', 'pro', 'enterprise'] as const).map((p) =>
      h('option', { value: p, selected: p === feed.plan }, p),
    ),
  );
  const limit = h('input', {
    id: 'feed-limit',
    name: 'hourlyLimit',
    type: 'number',
    min: 1,
    max: 10_000_000,
    step: 1,
    // Only an enterprise feed's own limit is shown as a value: another plan's fixed limit, carried over
    // when the plan changes to enterprise, was saved as its custom limit (1,000 for a former Pro feed),
    // and the enterprise default shown as a value looked set (and could not be pinned: unchanged).
    value: feed.customHourlyLimit ? feed.hourlyLimit : '',
    placeholder: 'the plan default',
    'aria-describedby': 'limit-help',
  });
  const requireOrigin = h('input', { id: 'feed-origin', type: 'checkbox', checked: feed.requireOrigin });
  const shownLimit = limit.value;
  const sync = () => {
    limit.disabled = plan.value !== 'enterprise';
    // Back on the feed's own enterprise plan: its limit again (a round trip through Pro erased it).
    limit.value = plan.value === 'enterprise' && feed.plan === 'enterprise' ? shownLimit : '';
  };
  plan.addEventListener('change', sync);
  sync();
  const save = h('button', { type: 'submit', class: 'primary' }, 'Save');
  const form = h(
    'form',
    { class: 'stack', novalidate: true },
    h('div', { class: 'field' }, h('label', { for: 'feed-name' }, 'Name'), name),
    h('div', { class: 'field' }, h('label', { for: 'feed-plan' }, 'Plan'), plan),
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'feed-limit' }, 'Hourly limit (requests per rolling hour)'),
      limit,
      h(
        'p',
        { id: 'limit-help', class: 'help' },
        'Free 100 and Pro 1,000 per hour are fixed; an Enterprise plan sets its own limit (empty: the plan default).',
      ),
    ),
    h(
      'div',
      { class: 'field checkbox' },
      requireOrigin,
      h('label', { for: 'feed-origin' }, 'Refuse requests without Origin or Referer (browser-only use)'),
    ),
    h('div', { class: 'actions' }, save),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    // Text the number field cannot read (`5-`) reads as empty, which would mean the plan's default.
    if (plan.value === 'enterprise' && limit.validity.badInput) {
      replace(
        status,
        errorBox(new Error('The hourly limit must be a whole number, or empty for the default.')),
      );
      limit.focus();
      return;
    }
    const patch: Record<string, unknown> = {
      plan: plan.value,
      requireOrigin: requireOrigin.checked,
    };
    // Only when changed: a stored name the API now refuses (control characters) must not block other saves.
    if (name.value.trim() !== feed.name) patch.name = name.value.trim();
    // Sent only when changed (the field shows the limit in force: sent with every save, the plan's default
    // became a custom limit); empty means the enterprise plan's default (null clears a custom limit).
    if (plan.value === 'enterprise' && (feed.plan !== 'enterprise' || limit.value !== shownLimit))
      patch.hourlyLimit = limit.value.trim() ? Number(limit.value) : null;
    busy(save, true);
    try {
      await adminResult<Feed>('PATCH', `/feeds/${enc(feed.feedId)}`, patch, { ifMatch: version });
      toast('Settings saved');
      refresh();
    } catch (error) {
      replace(status, errorBox(error, changedElsewhere(error) ?? 'Could not save'));
    } finally {
      busy(save, false);
    }
  });
  return h(
    'section',
    { 'aria-labelledby': 'general-h' },
    h('h2', { id: 'general-h' }, 'Plan and limits'),
    h(
      'p',
      { class: 'meta' },
      `Feed id `,
      h('code', {}, feed.feedId),
      ` · created ${formatDate(feed.createdAt)} · limit in force: ${feed.hourlyLimit.toLocaleString()} requests/hour`,
    ),
    form,
    deleteFeedForm(feed),
  );
}

/**
 * Deleting the feed: its products, search ids, usage and imports go with it, so the feed id is typed to
 * confirm (the button stays disabled until it matches).
 */
function deleteFeedForm(feed: Feed): HTMLElement {
  const status = h('div');
  const confirmation = h('input', {
    id: 'delete-confirm',
    name: 'confirm',
    autocomplete: 'off',
    'aria-describedby': 'delete-help',
  });
  const remove = h('button', { type: 'submit', class: 'danger', disabled: true }, 'Delete this feed');
  confirmation.addEventListener('input', () => {
    remove.disabled = confirmation.value.trim() !== feed.feedId;
  });
  const form = h(
    'form',
    { class: 'stack', novalidate: true },
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'delete-confirm' }, `Type ${feed.feedId} to confirm`),
      confirmation,
      h(
        'p',
        { id: 'delete-help', class: 'help' },
        'Its products, search ids (they stop working at once), usage and imports are deleted; this cannot be undone.',
      ),
    ),
    h('div', { class: 'actions' }, remove),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (confirmation.value.trim() !== feed.feedId) return;
    busy(remove, true);
    try {
      const answer = await admin<{ status?: string } | undefined>('DELETE', `/feeds/${enc(feed.feedId)}`);
      // A feed created again under this id starts without this one's last import.
      sessionStorage.removeItem(lastImportKey(feed.feedId));
      toast(
        answer?.status === 'deleting'
          ? `Feed ${feed.feedId} is being deleted`
          : `Feed ${feed.feedId} deleted`,
      );
      location.hash = '#/';
    } catch (error) {
      replace(status, errorBox(error, 'Could not delete the feed'));
      busy(remove, false);
    }
  });
  return h(
    'section',
    { 'aria-labelledby': 'delete-h', class: 'danger-zone' },
    h('h2', { id: 'delete-h' }, 'Delete feed'),
    form,
  );
}

// ---- Settings > API Keys ----

export function keysView({ feed, refresh }: FeedPage, keys: SearchKey[], created?: SearchKey): HTMLElement {
  const status = h('div');
  const label = h('input', { id: 'key-name', name: 'name', placeholder: 'storefront', maxlength: 100 });
  const createButton = h('button', { type: 'submit', class: 'primary' }, 'Create search id');
  const form = h(
    'form',
    { class: 'inline-form' },
    h('div', { class: 'field' }, h('label', { for: 'key-name' }, 'Label'), label),
    createButton,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    busy(createButton, true);
    try {
      const key = await admin<SearchKey>(
        'POST',
        `/feeds/${enc(feed.feedId)}/keys`,
        label.value.trim() ? { name: label.value.trim() } : {},
      );
      sessionStorage.setItem(`vps.created.${feed.feedId}`, key.searchId);
      toast('Search id created');
      refresh();
    } catch (error) {
      replace(status, errorBox(error, 'Could not create the search id'));
      busy(createButton, false);
    }
  });

  const copyButton = (key: SearchKey) =>
    h(
      'button',
      {
        type: 'button',
        class: 'copy',
        'data-search-id': key.searchId,
        'aria-label': `Copy search id ${key.name}`,
        onclick: async (event: Event) => {
          const button = event.currentTarget as HTMLButtonElement;
          try {
            await copyText(key.searchId);
            button.textContent = 'Copied';
            button.dataset.copied = 'true';
            toast(`Search id "${key.name}" copied to the clipboard`);
            setTimeout(() => (button.textContent = 'Copy'), 2000);
          } catch (error) {
            replace(status, errorBox(error, 'Copy failed'));
          }
        },
      },
      'Copy',
    );

  const revokeButton = (key: SearchKey) => {
    const button = h(
      'button',
      { type: 'button', class: 'danger', 'aria-label': `Revoke search id ${key.name}` },
      'Revoke',
    );
    button.addEventListener('click', async () => {
      if (button.dataset.confirm !== 'true') {
        button.dataset.confirm = 'true';
        button.textContent = 'Confirm revoke';
        button.setAttribute(
          'aria-label',
          `Confirm: revoke search id ${key.name}; requests with it will be refused`,
        );
        return;
      }
      busy(button, true);
      try {
        await admin<SearchKey>('DELETE', `/keys/${enc(key.searchId)}`);
        toast(`Search id "${key.name}" revoked`);
        refresh();
      } catch (error) {
        replace(status, errorBox(error, 'Could not revoke'));
        busy(button, false);
      }
    });
    return button;
  };

  const rows = keys.map((key) =>
    h(
      'tr',
      { 'data-search-id': key.searchId, class: key.revokedAt ? 'revoked' : '' },
      h('td', {}, key.name),
      h('td', {}, h('code', {}, mask(key.searchId))),
      h('td', {}, formatDate(key.createdAt)),
      h('td', {}, formatDate(key.lastUsedAt)),
      h(
        'td',
        {},
        key.revokedAt
          ? h('span', { class: 'badge bad' }, `revoked ${formatDate(key.revokedAt)}`)
          : h('span', { class: 'badge ok' }, 'live'),
      ),
      h('td', { class: 'row-actions' }, key.revokedAt ? null : [copyButton(key), revokeButton(key)]),
    ),
  );
  return h(
    'section',
    { 'aria-labelledby': 'keys-h' },
    h('h2', { id: 'keys-h' }, 'API Keys'),
    h(
      'p',
      {},
      'A search id authenticates public requests: ',
      h('code', {}, 'Authorization: Bearer <search id>'),
      ' or the body field ',
      h('code', {}, 'searchId'),
      '. Keep several live to rotate them.',
    ),
    created
      ? h(
          'div',
          { class: 'alert success new-key', role: 'status' },
          h('p', {}, `New search id "${created.name}":`),
          h(
            'p',
            {},
            h('code', { class: 'full-key', id: 'new-key' }, created.searchId),
            ' ',
            copyButton(created),
          ),
        )
      : null,
    form,
    status,
    keys.length === 0
      ? h('p', { class: 'muted' }, 'No search ids yet.')
      : h(
          'table',
          { class: 'table keys' },
          h('caption', { class: 'visually-hidden' }, 'Search ids of this feed'),
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ['Label', 'Search id', 'Created', 'Last used', 'Status', 'Actions'].map((t) =>
                h('th', { scope: 'col' }, t),
              ),
            ),
          ),
          h('tbody', {}, rows),
        ),
  );
}

// ---- Settings > Domains ----

/**
 * As the server keeps an entry (lib/domain/feeds.ts canonicalDomain): an internationalised name in the
 * punycode form browsers send in Origin, without a port or a trailing dot. A number or IPv4 shorthand
 * (`010`, `127.1`), which the URL parser reads as another address (0.0.0.8, 127.0.0.1), is sent as typed,
 * for the server to refuse with the address it stands for: rewritten here, the page saved an address
 * the shop never wrote.
 */
function canonicalDomain(text: string): string {
  const wildcard = text.startsWith('*.');
  const host = (wildcard ? text.slice(2) : text).replace(/:\d{1,5}$/, '').replace(/\.$/, '');
  if (!host || /[/:@?#\s]/.test(host)) return text;
  try {
    const hostname = new URL(`http://${host}`).hostname;
    if (/^\d{1,3}(\.\d{1,3}){3}$/.test(hostname) && hostname !== host) return text;
    return `${wildcard ? '*.' : ''}${hostname}`;
  } catch {
    return text;
  }
}

/**
 * The title of a save refused because the feed changed since the page loaded it (412): nothing was saved,
 * and the page must show the feed as it is now before the change is made again (the last domain's removal
 * then asks again, a domain another tab added is kept).
 */
function changedElsewhere(error: unknown): string | undefined {
  return error instanceof ApiError && error.code === 'precondition_failed'
    ? 'Not saved: this feed was changed elsewhere since the page loaded. Reload the page and make the change again'
    : undefined;
}

export function domainsView({ feed, version, refresh }: FeedPage): HTMLElement {
  const status = h('div');
  const input = h('input', {
    id: 'domain-input',
    name: 'domain',
    placeholder: 'shop.example.com or *.example.com',
    autocomplete: 'off',
    'aria-describedby': 'domain-help domain-error',
  });
  const problem = h('p', { id: 'domain-error', class: 'field-error', 'aria-live': 'assertive' });
  // Saved with the loaded version's If-Match: the list sent is the shown one edited, so a domain another
  // tab saved meanwhile must not be dropped by it (412 instead), nor a last one removed unconfirmed.
  const save = async (domains: string[], message: string) => {
    try {
      await adminResult<Feed>('PATCH', `/feeds/${enc(feed.feedId)}`, { domains }, { ifMatch: version });
      toast(message);
      refresh();
    } catch (error) {
      // An entry the server refuses that this page's own check lets through (a wildcard over a public
      // suffix such as *.co.uk: the server knows the list) is shown at the field, as the page's own are.
      const field =
        error instanceof ApiError
          ? error.details.find((detail) => /^domains\.\d+$/.test(detail.path))
          : undefined;
      if (field) {
        problem.textContent = `${domains[Number(field.path.split('.')[1])]}: ${field.message}.`;
        input.setAttribute('aria-invalid', 'true');
        input.focus();
        return;
      }
      replace(status, errorBox(error, changedElsewhere(error) ?? 'Could not save the domains'));
    }
  };
  const form = h(
    'form',
    { class: 'inline-form', novalidate: true },
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'domain-input' }, 'Add a domain'),
      input,
      h(
        'p',
        { id: 'domain-help', class: 'help' },
        'A hostname without scheme or path. *.example.com allows every subdomain of example.com.',
      ),
      problem,
    ),
    h('button', { type: 'submit', class: 'primary' }, 'Add domain'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = canonicalDomain(
      input.value
        .trim()
        .toLowerCase()
        .replace(/^https?:\/\//, '')
        .replace(/\/.*$/, ''),
    );
    let error = '';
    if (!value) error = 'Enter a domain.';
    else if (!DOMAIN_PATTERN.test(value))
      error = `"${input.value.trim()}" is not a hostname such as shop.example.com or *.example.com.`;
    else if (/^\*\.[^.]+$/.test(value))
      error = `${value} would allow every site under .${value.slice(2)}: use *.example.com.`;
    else if (feed.domains.includes(value)) error = `${value} is already in the list.`;
    problem.textContent = error;
    input.setAttribute('aria-invalid', String(Boolean(error)));
    if (error) {
      input.focus();
      return;
    }
    void save([...feed.domains, value], `${value} added`);
  });
  return h(
    'section',
    { 'aria-labelledby': 'domains-h' },
    h('h2', { id: 'domains-h' }, 'Allowed domains'),
    h(
      'p',
      {},
      feed.domains.length === 0
        ? 'No domains: requests from any origin are accepted.'
        : 'Browser requests must come from one of these hosts (Origin or Referer); others get 403.',
    ),
    feed.domains.length > 0
      ? h(
          'ul',
          { class: 'chips domains' },
          feed.domains.map((domain) =>
            h(
              'li',
              { 'data-domain': domain },
              h('code', {}, domain),
              ' ',
              h(
                'button',
                {
                  type: 'button',
                  class: 'link danger',
                  'aria-label': `Remove ${domain}`,
                  onclick: (event: Event) => {
                    const button = event.currentTarget as HTMLButtonElement;
                    // The last one opens the feed's search ids to every origin: asked once more.
                    if (feed.domains.length === 1 && button.dataset.confirm !== 'true') {
                      button.dataset.confirm = 'true';
                      button.textContent = 'Confirm: allow every origin';
                      button.setAttribute(
                        'aria-label',
                        `Confirm: remove ${domain}, the last domain; requests from any origin will be accepted`,
                      );
                      return;
                    }
                    void save(
                      feed.domains.filter((d) => d !== domain),
                      `${domain} removed`,
                    );
                  },
                },
                'Remove',
              ),
            ),
          ),
        )
      : null,
    form,
    status,
  );
}

// ---- Usage ----

export function usageView({ feed }: FeedPage): HTMLElement {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading usage…'));
  const range = h(
    'select',
    { id: 'usage-range' },
    [7, 30, 90].map((days) => h('option', { value: days, selected: days === 30 }, `Last ${days} days`)),
  );
  const load = async () => {
    const days = Number(range.value);
    const to = new Date().toISOString().slice(0, 10);
    const from = new Date(Date.now() - (days - 1) * 86_400_000).toISOString().slice(0, 10);
    try {
      // The keys for their names: the report knows a search id only by its id.
      const [report, { keys }] = await Promise.all([
        admin<UsageReport>('GET', `/feeds/${enc(feed.feedId)}/usage?from=${from}&to=${to}`),
        // (Without them the ids go unnamed: the report is not lost for the names.)
        admin<{ keys: SearchKey[] }>('GET', `/feeds/${enc(feed.feedId)}/keys`).catch(() => ({ keys: [] })),
      ]);
      const keyOf = new Map(keys.map((key) => [key.searchId, key]));
      const t = report.totals;
      const endpoints = [...new Set(report.days.map((row) => row.endpoint))].sort();
      replace(
        body,
        h(
          'ul',
          { class: 'stats' },
          [
            ['Requests', t.requests, 'requests'],
            ['Answered', t.ok, 'ok'],
            ['Client errors', t.clientErrors, 'client'],
            ['Server errors', t.serverErrors, 'server'],
            ['429 rate limited', t.rateLimited, 'limited'],
          ].map(([label, value, key]) =>
            h(
              'li',
              { class: 'stat', 'data-stat': key },
              h('span', { class: 'stat-value' }, Number(value).toLocaleString()),
              h('span', { class: 'stat-label' }, label),
            ),
          ),
        ),
        h(
          'figure',
          { class: 'chart-box' },
          usageChart(report),
          h(
            'figcaption',
            { class: 'legend' },
            endpoints.map((e) =>
              h(
                'span',
                {},
                h('span', { class: 'swatch', style: `background:${ENDPOINT_COLOURS[e] ?? '#555'}` }),
                e,
              ),
            ),
            h(
              'span',
              {},
              h('span', { class: 'swatch line', style: `border-color:${RATE_LIMITED_COLOUR}` }),
              '429 rate limited',
            ),
            endpoints.length === 0 ? h('span', { class: 'muted' }, 'No requests in this range.') : null,
          ),
        ),
        h(
          'details',
          {},
          h('summary', {}, 'Table: requests per day per endpoint'),
          h(
            'table',
            { class: 'table' },
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ['Day', 'Endpoint', 'Requests', 'OK', 'Client errors', 'Server errors', '429'].map((c) =>
                  h('th', { scope: 'col' }, c),
                ),
              ),
            ),
            h(
              'tbody',
              {},
              report.days.map((row) =>
                h(
                  'tr',
                  {},
                  [
                    row.day,
                    row.endpoint,
                    row.requests,
                    row.ok,
                    row.clientErrors,
                    row.serverErrors,
                    row.rateLimited,
                  ].map((c) => h('td', {}, c)),
                ),
              ),
            ),
          ),
        ),
        report.keys.length > 0
          ? h(
              'section',
              {},
              h('h3', {}, 'Per search id'),
              h(
                'table',
                { class: 'table' },
                h(
                  'thead',
                  {},
                  h(
                    'tr',
                    {},
                    ['Name', 'Search id', 'Requests', '429'].map((c) => h('th', { scope: 'col' }, c)),
                  ),
                ),
                h(
                  'tbody',
                  {},
                  report.keys.map((k) =>
                    h(
                      'tr',
                      {},
                      h('td', {}, keyLabel(keyOf.get(k.searchId))),
                      h('td', {}, h('code', {}, mask(k.searchId))),
                      h('td', {}, k.requests),
                      h('td', {}, k.rateLimited),
                    ),
                  ),
                ),
              ),
            )
          : null,
        (report.contexts ?? []).length > 0
          ? h(
              'section',
              { class: 'usage-contexts' },
              h('h3', {}, 'Related products by page context'),
              h(
                'table',
                { class: 'table' },
                h(
                  'thead',
                  {},
                  h(
                    'tr',
                    {},
                    ['Type', 'Domain', 'Requests'].map((c) => h('th', { scope: 'col' }, c)),
                  ),
                ),
                h(
                  'tbody',
                  {},
                  report.contexts!.map((c) =>
                    h(
                      'tr',
                      {},
                      h('td', {}, c.type || '—'),
                      h('td', {}, c.domain || '—'),
                      h('td', {}, c.requests),
                    ),
                  ),
                ),
              ),
            )
          : null,
      );
    } catch (error) {
      replace(body, errorBox(error, 'Could not load usage'));
    }
  };
  range.addEventListener('change', () => void load());
  void load();
  return h(
    'section',
    { 'aria-labelledby': 'usage-h' },
    h('h2', { id: 'usage-h' }, 'Usage'),
    h(
      'div',
      { class: 'inline-form' },
      h('div', { class: 'field' }, h('label', { for: 'usage-range' }, 'Range'), range),
      h('button', { type: 'button', onclick: () => void load() }, 'Refresh'),
    ),
    body,
  );
}

// ---- Imports ----

const FORMATS: Record<string, string> = {
  xml: 'xml',
  rss: 'xml',
  atom: 'xml',
  csv: 'csv',
  tsv: 'tsv',
  txt: 'tsv',
  json: 'json',
  jsonl: 'jsonl',
  ndjson: 'jsonl',
};

function problemText(problem: ImportProblem): string {
  // `row: null` marks a note about the file as a whole (products it does not list): no "row null".
  const where = [
    ...(problem.row !== null ? [`row ${problem.row}`] : []),
    ...(problem.productId !== undefined ? [`productId ${problem.productId}`] : []),
  ];
  return `${where.length ? `${where.join(', ')}: ` : ''}${problem.message}`;
}

/**
 * One severity's problems: errors (rows not imported, counted in Failed) apart from warnings (products
 * imported without something), so that a clean import with warnings does not read as one with failures.
 */
function problemList(
  severity: ImportProblem['severity'],
  problems: ImportProblem[],
  /** Errors: the import's failed count, of which the record keeps the first 100. */
  failed = 0,
): HTMLElement | null {
  if (problems.length === 0) return null;
  const noun = `${severity}${problems.length === 1 ? '' : 's'}`;
  const shown =
    severity === 'error' && failed > problems.length
      ? `The first ${problems.length} of ${failed} errors`
      : `${problems.length} ${noun}`;
  return h(
    'details',
    { class: `problems ${severity}`, open: problems.length <= 10 },
    h('summary', {}, shown, severity === 'error' ? ' (rows not imported)' : ' (not counted as failed)'),
    h(
      'ol',
      { class: 'errors' },
      problems.map((problem) => h('li', {}, problemText(problem))),
    ),
  );
}

/** The badge colour of an import's status, the same in its progress and in the recent imports. */
function statusTone(status: ImportStatus['status']): string {
  return status === 'failed' ? 'bad' : status === 'succeeded' ? 'ok' : 'busy';
}

export function importProgress(state: ImportStatus): HTMLElement {
  const total = state.total ?? 0;
  const processed = state.processed ?? 0;
  const percent = total > 0 ? Math.round((processed / total) * 100) : state.status === 'succeeded' ? 100 : 0;
  const problems = state.errors ?? [];
  return h(
    'div',
    { class: 'import-progress', 'data-status': state.status },
    h(
      'p',
      {},
      h('span', { class: `badge ${statusTone(state.status)}` }, state.status),
      state.importId ? [' import ', h('code', {}, state.importId)] : null,
    ),
    h(
      'div',
      {
        class: 'progress',
        role: 'progressbar',
        'aria-label': 'Import progress',
        'aria-valuemin': 0,
        'aria-valuemax': 100,
        'aria-valuenow': percent,
        'aria-valuetext': `${processed} of ${total || '?'} products processed`,
      },
      h('div', { class: 'bar', style: `width:${percent}%` }),
    ),
    h(
      'ul',
      { class: 'stats small' },
      [
        ['Total', state.total],
        ['Processed', state.processed],
        ['Embedded', state.embedded],
        // Changed content, same images: with these four the processed count adds up.
        ['Updated (same images)', state.updated],
        ['Skipped (unchanged)', state.skipped],
        ['Failed', state.failed],
        ...(state.removed ? [['Removed', state.removed]] : []),
      ].map(([label, value]) =>
        h(
          'li',
          { class: 'stat', 'data-stat': String(label).split(' ')[0]!.toLowerCase() },
          h('span', { class: 'stat-value' }, value ?? 0),
          h('span', { class: 'stat-label' }, label),
        ),
      ),
    ),
    state.message
      ? h('p', { class: `alert ${state.status === 'failed' ? 'error' : 'info'}` }, state.message)
      : null,
    problemList(
      'error',
      problems.filter((problem) => problem.severity !== 'warning'),
      state.failed,
    ),
    problemList(
      'warning',
      problems.filter((problem) => problem.severity === 'warning'),
    ),
  );
}

export function importsView({ feed }: FeedPage): HTMLElement {
  const status = h('div', { 'aria-live': 'polite' });
  const url = h('input', { id: 'import-url', type: 'url', placeholder: 'https://shop.example.com/feed.xml' });
  const file = h('input', {
    id: 'import-file',
    type: 'file',
    accept: '.xml,.rss,.atom,.csv,.tsv,.txt,.json,.jsonl,.ndjson',
  });
  const format = h(
    'select',
    { id: 'import-format' },
    h('option', { value: '' }, 'from the file name'),
    ['xml', 'csv', 'tsv', 'json', 'jsonl'].map((f) => h('option', { value: f }, f)),
  );
  const startButton = h('button', { type: 'submit', class: 'primary' }, 'Start import');
  const storageKey = lastImportKey(feed.feedId);
  let timer: number | undefined;

  // Each poll chain stops once a newer one started (a Show click while a request was in flight).
  let generation = 0;
  const poll = async (importId: string) => {
    window.clearTimeout(timer);
    const mine = ++generation;
    try {
      const state = await admin<ImportStatus>('GET', `/feeds/${enc(feed.feedId)}/imports/${enc(importId)}`);
      if (mine !== generation) return;
      replace(status, importProgress({ importId, ...state }));
      if (state.status === 'queued' || state.status === 'running') {
        if (status.isConnected) timer = window.setTimeout(() => void poll(importId), 600);
      } else if (status.isConnected) void loadRecent();
    } catch (error) {
      if (mine !== generation) return;
      if (error instanceof ApiError && error.code === 'import_not_found') {
        // This tab's last import is gone (the feed was deleted and created again): the newest one instead.
        sessionStorage.removeItem(storageKey);
        const [newest] = await loadRecent();
        if (newest?.importId && newest.importId !== importId) void poll(newest.importId);
        else replace(status, h('p', { class: 'muted' }, 'No import to show.'));
        return;
      }
      replace(
        status,
        error instanceof ApiError && error.notAvailable
          ? unavailableBox('Import progress', error)
          : errorBox(error, 'Could not read the import'),
      );
    }
  };

  const form = h(
    'form',
    { class: 'stack' },
    h(
      'fieldset',
      {},
      h('legend', {}, 'Product feed (Google Merchant Center RSS/Atom XML, CSV/TSV or JSON)'),
      h('div', { class: 'field' }, h('label', { for: 'import-url' }, 'Feed URL'), url),
      h('p', { class: 'or' }, 'or'),
      h('div', { class: 'field' }, h('label', { for: 'import-file' }, 'Upload a feed file'), file),
      h('div', { class: 'field' }, h('label', { for: 'import-format' }, 'File format'), format),
    ),
    h('div', { class: 'actions' }, startButton),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const chosen = file.files?.[0];
    let body: unknown;
    if (chosen && url.value.trim()) {
      // Both given: neither is silently dropped.
      replace(status, errorBox(new Error('Choose either a feed URL or a file, not both.')));
      return;
    }
    if (chosen) {
      const ext = chosen.name.split('.').pop()?.toLowerCase() ?? '';
      const fmt = format.value || FORMATS[ext];
      if (!fmt) {
        replace(
          status,
          errorBox(new Error(`Cannot tell the format of ${chosen.name}; choose it in "File format".`)),
        );
        return;
      }
      body = { format: fmt, content: await chosen.text() };
    } else if (url.value.trim()) {
      body = { url: url.value.trim() };
    } else {
      replace(status, errorBox(new Error('Enter a feed URL or choose a file.')));
      url.focus();
      return;
    }
    busy(startButton, true);
    try {
      const started = await admin<{ importId: string; status: ImportStatus['status'] }>(
        'POST',
        `/feeds/${enc(feed.feedId)}/imports`,
        body,
      );
      sessionStorage.setItem(storageKey, started.importId);
      replace(status, importProgress({ importId: started.importId, status: started.status }));
      void poll(started.importId);
      void loadRecent();
    } catch (error) {
      replace(
        status,
        error instanceof ApiError && error.notAvailable
          ? unavailableBox('Feed import', error)
          : errorBox(error, 'Could not start the import'),
      );
    } finally {
      busy(startButton, false);
    }
  });
  // The feed's recent imports, from the API (not only this tab's last one): each opens its progress.
  const recent = h('div', {}, h('p', { class: 'muted' }, 'Loading imports…'));
  let recentTimer: number | undefined;
  const loadRecent = async (): Promise<ImportStatus[]> => {
    try {
      const { imports } = await admin<{ imports: ImportStatus[] }>(
        'GET',
        `/feeds/${enc(feed.feedId)}/imports?limit=10`,
      );
      replace(
        recent,
        recentImports(imports, (importId) => void poll(importId)),
      );
      // While one of them runs, the list follows it (whichever import the progress shows).
      window.clearTimeout(recentTimer);
      if (recent.isConnected && imports.some((i) => i.status === 'queued' || i.status === 'running'))
        recentTimer = window.setTimeout(() => void loadRecent(), 3000);
      return imports;
    } catch (error) {
      replace(recent, errorBox(error, 'Could not list the imports'));
      return [];
    }
  };
  const last = sessionStorage.getItem(storageKey);
  if (last) void poll(last);
  void loadRecent().then((imports) => {
    if (!last && imports[0]?.importId) void poll(imports[0].importId);
  });
  return h(
    'section',
    { 'aria-labelledby': 'imports-h' },
    h('h2', { id: 'imports-h' }, 'Imports'),
    form,
    h('h3', {}, 'Progress'),
    status,
    h('h3', {}, 'Recent imports'),
    recent,
  );
}

/** The newest imports of a feed, newest first; `open` shows one's progress above. */
function recentImports(imports: ImportStatus[], open: (importId: string) => void): HTMLElement {
  if (imports.length === 0) return h('p', { class: 'muted' }, 'No imports yet.');
  return h(
    'table',
    { class: 'table recent-imports' },
    h('caption', { class: 'visually-hidden' }, 'Recent imports, newest first'),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Started', 'Status', 'Processed', 'Failed', 'Removed', ''].map((t) => h('th', {}, t)),
      ),
    ),
    h(
      'tbody',
      {},
      imports.map((item) =>
        h(
          'tr',
          { 'data-import-id': item.importId ?? '' },
          h('td', {}, formatDate(item.createdAt)),
          h(
            'td',
            {},
            h('span', { class: `badge status-${item.status} ${statusTone(item.status)}` }, item.status),
          ),
          h('td', {}, `${item.processed ?? 0}${item.total ? ` of ${item.total}` : ''}`),
          h('td', {}, String(item.failed ?? 0)),
          h('td', {}, String(item.removed ?? 0)),
          h(
            'td',
            {},
            h(
              'button',
              {
                type: 'button',
                class: 'link',
                'aria-label': `Show the progress of import ${item.importId ?? ''}`,
                onclick: () => item.importId && open(item.importId),
              },
              'Show',
            ),
          ),
        ),
      ),
    ),
  );
}

// ---- Products ----

interface ProductPage {
  products?: Product[];
  items?: Product[];
  nextCursor?: string | null;
  cursor?: string | null;
}

export function productsView({ feed }: FeedPage): HTMLElement {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading products…'));
  const cursors: (string | undefined)[] = [undefined];
  let page = 0;
  /** The pager button just used: the page drawn anew, focus goes back to it (not lost to the body). */
  let refocus: 'prev' | 'next' | undefined;
  const load = async () => {
    const cursor = cursors[page];
    try {
      const result = await admin<ProductPage | Product[]>(
        'GET',
        `/feeds/${enc(feed.feedId)}/products?limit=24${cursor ? `&cursor=${enc(cursor)}` : ''}`,
      );
      const items = Array.isArray(result) ? result : (result.products ?? result.items ?? []);
      const next = Array.isArray(result) ? undefined : (result.nextCursor ?? result.cursor ?? undefined);
      cursors[page + 1] = next ?? undefined;
      const prevButton = h(
        'button',
        {
          type: 'button',
          disabled: page === 0,
          onclick: () => {
            page -= 1;
            refocus = 'prev';
            void load();
          },
        },
        '← Previous',
      );
      const nextButton = h(
        'button',
        {
          type: 'button',
          disabled: !next,
          onclick: () => {
            page += 1;
            refocus = 'next';
            void load();
          },
        },
        'Next →',
      );
      replace(
        body,
        items.length === 0 && page === 0
          ? h('p', { class: 'alert info' }, 'This feed has no products yet. Import a feed under Imports.')
          : h('ul', { class: 'grid products', 'data-count': items.length }, items.map(productCard)),
        h(
          'nav',
          { class: 'pager', 'aria-label': 'Product pages' },
          prevButton,
          h('span', {}, `Page ${page + 1}`),
          nextButton,
        ),
      );
      // On the first or last page its button is disabled: the other one then.
      const [used, other] = refocus === 'next' ? [nextButton, prevButton] : [prevButton, nextButton];
      if (refocus) (used.disabled ? other : used).focus();
      refocus = undefined;
    } catch (error) {
      replace(
        body,
        error instanceof ApiError && error.notAvailable
          ? unavailableBox('The products listing', error)
          : errorBox(error, 'Could not load products'),
      );
    }
  };
  void load();
  return h('section', { 'aria-labelledby': 'products-h' }, h('h2', { id: 'products-h' }, 'Products'), body);
}
