import { describe, expect, it } from 'vitest';
import { usageReport } from '#lib/domain/admin/usage.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { UsageRow, UsageStore } from '#lib/ports.ts';

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

function reportOf(rows: UsageRow[]) {
  const usage = { list: async () => rows } as unknown as UsageStore;
  const feeds = { get: async () => feed } as never;
  return usageReport({ feeds, usage, clock: { now: () => new Date('2026-11-25T00:00:00Z') } }, 'shop', {
    from: '2026-11-01',
    to: '2026-11-25',
  });
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
});
