import { describe, expect, it } from 'vitest';
import { MAX_CONTEXTS, usageContextOf, usageReport } from '#lib/domain/admin/usage.ts';
import type { UsageQuery } from '#lib/domain/admin/schemas.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { UsageContextRow, UsageRow, UsageStore } from '#lib/ports.ts';

const feed: Feed = {
  feedId: 'shop',
  name: 'Shop',
  plan: 'free',
  domains: [],
  requireOrigin: false,
  createdAt: '2026-11-20T12:00:00.000Z',
  updatedAt: '2026-11-20T12:00:00.000Z',
};
const row = (day: string, searchId: string, feedCreatedAt?: string): UsageRow => ({
  day,
  endpoint: 'search_image',
  searchId,
  ...(feedCreatedAt ? { feedCreatedAt } : {}),
  requests: 1,
  ok: 1,
  clientErrors: 0,
  serverErrors: 0,
  rateLimited: 0,
});

function reportOf(
  rows: UsageRow[],
  contexts: UsageContextRow[] = [],
  query: UsageQuery = { from: '2026-11-01', to: '2026-11-25' },
) {
  const usage = { list: async () => rows, listContexts: async () => contexts } as unknown as UsageStore;
  const feeds = { get: async () => feed } as never;
  return usageReport({ feeds, usage, clock: { now: () => new Date('2026-11-25T00:00:00Z') } }, 'shop', query);
}

describe('usageReport', () => {
  it("counts this feed's rows, not those an earlier feed of the same id left", async () => {
    const report = await reportOf([
      row('2026-11-21', 'vps_now', feed.createdAt),
      row('2026-11-21', 'vps_before', '2026-11-02T08:00:00.000Z'),
    ]);
    expect(report.keys.map((k) => k.searchId)).toEqual(['vps_now']);
    expect(report.totals.requests).toBe(1);
  });

  it('counts rows kept before the feed was recorded on them from the day the feed was created', async () => {
    const report = await reportOf([
      row('2026-11-19', 'vps_old'),
      row('2026-11-20', 'vps_legacy'),
      row('2026-11-22', 'vps_legacy'),
    ]);
    expect(report.totals.requests).toBe(2);
    expect(report.keys.map((k) => k.searchId)).toEqual(['vps_legacy']);
  });

  it("sums requests per context over the days, most frequent first, this feed's only and at most 100", async () => {
    const context = (day: string, type: string, domain: string, requests: number, fc = feed.createdAt) => ({
      day,
      type,
      domain,
      feedCreatedAt: fc,
      requests,
    });
    const report = await reportOf(
      [],
      [
        context('2026-11-21', 'pdp', 'shop.example', 3),
        context('2026-11-22', 'pdp', 'shop.example', 4),
        context('2026-11-22', 'cart', 'shop.example', 5),
        context('2026-11-22', 'pdp', 'other.example', 1),
        // An earlier feed of the same id.
        context('2026-11-22', 'home', 'shop.example', 9, '2026-11-02T08:00:00.000Z'),
      ],
    );
    expect(report.contexts).toEqual([
      { type: 'pdp', domain: 'shop.example', requests: 7 },
      { type: 'cart', domain: 'shop.example', requests: 5 },
      { type: 'pdp', domain: 'other.example', requests: 1 },
    ]);
    const many = await reportOf(
      [],
      Array.from({ length: MAX_CONTEXTS + 5 }, (_, i) => context('2026-11-22', `t${i}`, '', i + 1)),
    );
    expect(many.contexts).toHaveLength(MAX_CONTEXTS);
    expect(many.contexts[0]).toEqual({
      type: `t${MAX_CONTEXTS + 4}`,
      domain: '',
      requests: MAX_CONTEXTS + 5,
    });
  });

  it('meters a context by its type and domain in lower case, and none that names neither', () => {
    expect(usageContextOf({ type: ' pdp ', domain: 'Shop.Example ', category: 'x' } as never)).toEqual({
      type: 'pdp',
      domain: 'shop.example',
    });
    // One short line of text each: a type's other characters as _, a domain that is no hostname left out
    expect(usageContextOf({ type: 'Product Page\n2', domain: 'https://shop.example/p' })).toEqual({
      type: 'product_page_2',
      domain: '',
    });
    for (const domain of ['1', '0x10', '127.1', 'a\u200bb.example', 'shop.123', '999.1.1.1'])
      expect(usageContextOf({ type: 'pdp', domain }), domain).toEqual({ type: 'pdp', domain: '' });
    expect(usageContextOf({ type: 'x'.repeat(100), domain: 'Bücher.de.' })).toEqual({
      type: 'x'.repeat(32),
      domain: 'xn--bcher-kva.de',
    });
    // Any script's letters are kept (they were all `_`), one composition of them, whole characters only;
    // bidi and invisible characters are not letters
    const typeOf = (type: string) => usageContextOf({ type })?.type;
    expect(typeOf('Страница товара')).toBe('страница_товара');
    expect(typeOf('Cafe\u0301')).toBe(typeOf('Caf\u00e9'));
    expect(typeOf('商品ページ')).toBe('商品ページ');
    expect(typeOf(`${'x'.repeat(31)}\u{20000}y`)).toBe(`${'x'.repeat(31)}\u{20000}`);
    expect(typeOf('a\u202eb\u200bc\u0000d')).toBe('a_b_c_d');
    // Lower case first, then composed: J with a caron and ǰ are one; invisible letters and marks are not kept
    expect(typeOf('J\u030c')).toBe('\u01f0');
    for (const invisible of ['\ufe0f', '\u034f', '\u3164']) expect(typeOf(`pdp${invisible}`)).toBe('pdp_');
    expect(usageContextOf({ category: 'Shoes', pageUrl: 'https://x' } as never)).toBeUndefined();
    expect(usageContextOf({ type: ' ', domain: '' })).toBeUndefined();
    expect(usageContextOf(undefined)).toBeUndefined();
  });

  it('sums every counter, orders days by day then endpoint and keys by requests, most first', async () => {
    // Prepare: rows in no particular order (the store's order is not part of its contract)
    const counted = (
      day: string,
      endpoint: UsageRow['endpoint'],
      searchId: string,
      counts: Partial<UsageRow>,
    ) => ({
      ...row(day, searchId, feed.createdAt),
      endpoint,
      ok: 0,
      ...counts,
    });
    const rows = [
      counted('2026-11-22', 'search_image', 'vps_a', { requests: 1, ok: 1 }),
      counted('2026-11-21', 'search_image', 'vps_b', { requests: 2, serverErrors: 2 }),
      counted('2026-11-21', 'related', 'vps_b', { requests: 3, clientErrors: 1, rateLimited: 2 }),
    ];
    // Act
    const report = await reportOf(rows);
    // Assess
    expect(report.days.map((d) => [d.day, d.endpoint])).toEqual([
      ['2026-11-21', 'related'],
      ['2026-11-21', 'search_image'],
      ['2026-11-22', 'search_image'],
    ]);
    expect(report.days[1]).toMatchObject({ requests: 2, ok: 0, serverErrors: 2 });
    expect(report.keys.map((k) => [k.searchId, k.requests])).toEqual([
      ['vps_b', 5],
      ['vps_a', 1],
    ]);
    expect(report.keys[0]).toMatchObject({ clientErrors: 1, serverErrors: 2, rateLimited: 2 });
    expect(report.totals).toEqual({ requests: 6, ok: 1, clientErrors: 1, serverErrors: 2, rateLimited: 2 });
  });

  it('covers the last 30 days by default and refuses a range of more than 400 days', async () => {
    // Act
    const byDefault = await reportOf([], [], {});
    const longest = await reportOf([], [], { from: '2025-10-22', to: '2026-11-25' });
    const tooLong = reportOf([], [], { from: '2025-10-21', to: '2026-11-25' });
    // Assess: 30 days counting today; 400 days counting both ends pass, 401 are one too many, and the
    // refusal says so in the same count (it said "under 400 days" of a range that 400 days pass)
    expect([byDefault.from, byDefault.to]).toEqual(['2026-10-27', '2026-11-25']);
    expect([longest.from, longest.to]).toEqual(['2025-10-22', '2026-11-25']);
    await expect(tooLong).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringContaining('at most 400 days, from and to included'),
    });
  });
});
