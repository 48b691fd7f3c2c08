import { requireFeed } from '#lib/domain/admin/feeds.ts';
import { domainEntry, type UsageQuery } from '#lib/domain/admin/schemas.ts';
import { ValidationError } from '#lib/domain/errors.ts';
import type {
  Clock,
  Endpoint,
  FeedStore,
  UsageContext,
  UsageCounters,
  UsageRow,
  UsageStore,
} from '#lib/ports.ts';

const DAY_MS = 86_400_000;
const DEFAULT_DAYS = 30;
const MAX_DAYS = 400;

export interface UsageReport {
  feedId: string;
  from: string;
  to: string;
  /** One row per day and endpoint, summed over the feed's search ids. */
  days: ({ day: string; endpoint: Endpoint } & UsageCounters)[];
  /** Per search id over the whole range. */
  keys: ({ searchId: string } & UsageCounters)[];
  /** Related-products requests per context over the range, the MAX_CONTEXTS most frequent. */
  contexts: (UsageContext & { requests: number })[];
  totals: UsageCounters;
}

/** Contexts a report lists: a widget on many sites or page types must not make it unbounded. */
export const MAX_CONTEXTS = 100;

/**
 * What a related-products request's context is metered as, or nothing when it names neither a type nor a
 * domain: the type in lower case, its other characters than visible letters, marks and digits (of any script),
 * `_` and `-` as `_`, at most 32 of them (`Product Page` → `product_page`, `Страница товара` →
 * `страница_товара`); the domain as a hostname in its canonical form (the one feed
 * domains take), none when it is no hostname. So a metered value is always one short line of text.
 */
export function usageContextOf(
  context: { type?: string | undefined; domain?: string | undefined } | undefined,
): UsageContext | undefined {
  // Letters (with their marks) and digits of any script: a shop names its pages in its own language.
  // Lower case, then composed one way (NFC), so one word is one context; invisible ones (variation
  // selectors, fillers) are no letters. 32 characters, not UTF-16 units, so no character is cut.
  const type = Array.from(
    (context?.type ?? '')
      .trim()
      .toLowerCase()
      .normalize('NFC')
      .replace(/(?:[^\p{L}\p{M}\p{N}_-]|\p{Default_Ignorable_Code_Point})+/gu, '_'),
  )
    .slice(0, 32)
    .join('');
  // A hostname as a feed domain entry takes it (what feed domains refuse is not kept), not a wildcard.
  const entry = domainEntry.safeParse(context?.domain ?? '');
  const domain = entry.success && !entry.data.startsWith('*.') ? entry.data : '';
  return type || domain ? { type, domain } : undefined;
}

/** Usage of a feed per day per endpoint. Steps: check feed and range, read rows, aggregate. */
export async function usageReport(
  deps: { feeds: FeedStore; usage: UsageStore; clock: Clock },
  feedId: string,
  query: UsageQuery,
): Promise<UsageReport> {
  const feed = await requireFeed(deps.feeds, feedId);
  const to = query.to ?? deps.clock.now().toISOString().slice(0, 10);
  const from =
    query.from ?? new Date(Date.parse(to) - (DEFAULT_DAYS - 1) * DAY_MS).toISOString().slice(0, 10);
  const span = (Date.parse(to) - Date.parse(from)) / DAY_MS;
  // Days are counted as the report lists them, from and to included: a span of 399 is 400 days.
  if (Number.isNaN(span) || span < 0 || span >= MAX_DAYS) {
    throw new ValidationError(
      'Invalid range: from must not be after to, and the range must be at most ' +
        `${MAX_DAYS} days, from and to included.`,
      [{ path: 'from', message: 'invalid range' }],
    );
  }
  // Rows of an earlier feed with this id: requests a public function answered from its auth cache just
  // after that feed's deletion had removed its rows. They are not this feed's usage.
  // (Rows written before feedCreatedAt was kept: those of days before this feed was created.)
  const ofThisFeed = (row: { day: string; feedCreatedAt?: string }) =>
    row.feedCreatedAt === undefined
      ? row.day >= feed.createdAt.slice(0, 10)
      : row.feedCreatedAt === feed.createdAt;
  const [rows, contextRows] = await Promise.all([
    deps.usage.list(feedId, from, to).then((all) => all.filter(ofThisFeed)),
    deps.usage.listContexts(feedId, from, to).then((all) => all.filter(ofThisFeed)),
  ]);
  const contexts = new Map<string, UsageContext & { requests: number }>();
  for (const row of contextRows) {
    const key = JSON.stringify([row.type, row.domain]);
    if (!contexts.has(key)) contexts.set(key, { type: row.type, domain: row.domain, requests: 0 });
    contexts.get(key)!.requests += row.requests;
  }
  const days = new Map<string, { day: string; endpoint: Endpoint } & UsageCounters>();
  const keys = new Map<string, { searchId: string } & UsageCounters>();
  const totals = zero();
  for (const row of rows) {
    const dayKey = `${row.day}#${row.endpoint}`;
    if (!days.has(dayKey)) days.set(dayKey, { day: row.day, endpoint: row.endpoint, ...zero() });
    if (!keys.has(row.searchId)) keys.set(row.searchId, { searchId: row.searchId, ...zero() });
    add(days.get(dayKey)!, row);
    add(keys.get(row.searchId)!, row);
    add(totals, row);
  }
  return {
    feedId,
    from,
    to,
    days: [...days.values()].sort(
      (a, b) => a.day.localeCompare(b.day) || a.endpoint.localeCompare(b.endpoint),
    ),
    keys: [...keys.values()].sort((a, b) => b.requests - a.requests),
    contexts: [...contexts.values()]
      .sort(
        (a, b) => b.requests - a.requests || a.type.localeCompare(b.type) || a.domain.localeCompare(b.domain),
      )
      .slice(0, MAX_CONTEXTS),
    totals,
  };
}

function zero(): UsageCounters {
  return { requests: 0, ok: 0, clientErrors: 0, serverErrors: 0, rateLimited: 0 };
}

function add(into: UsageCounters, row: UsageRow): void {
  into.requests += row.requests;
  into.ok += row.ok;
  into.clientErrors += row.clientErrors;
  into.serverErrors += row.serverErrors;
  into.rateLimited += row.rateLimited;
}
