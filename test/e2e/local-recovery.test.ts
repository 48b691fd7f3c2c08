import { readdir, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startTestStack } from '#test/support/local-stack.ts';

/**
 * What `npm start` finds of a run killed part way (its own file: each local stack configures the
 * process's container, so the stacks of one file must not overlap with another file's shared stack).
 */
describe('local runtime recovery', () => {
  it('finishes at start the feed deletions a killed run left part way, the demo feed’s included', async () => {
    // Prepare: two feeds marked as being deleted, as a run killed during their DELETE leaves them
    const { startLocalStack } = await import('#lib/local/stack.ts');
    const first = await startTestStack({ DEMO_SEED: 'false' });
    const dataDir = first.config.local.dataDir;
    try {
      await first.admin('POST', '/admin/v1/feeds', { feedId: 'half-deleted', name: 'Half' });
      const key = await first.admin('POST', '/admin/v1/feeds/half-deleted/keys', { name: 'web' });
      for (const feedId of ['half-deleted', 'demo'])
        await first.container.feeds.markDeleting(feedId, new Date());
      // A deletion killed after removing its feed, before giving the feed's lease up
      const hour = new Date(Date.now() + 3_600_000);
      await first.container.imports.takeLease('gone', 'killed deletion', hour, new Date());
      // An object whose metadata the kill left empty, and the pid file a killed run leaves behind
      await first.container.objects.put('features/torn/p/0.gvlf', 'half written');
      await first.close();
      const files = await readdir(join(dataDir, 's3'), { recursive: true });
      const torn = files.find((file) => file.endsWith('torn/p/0.gvlf._S3rver_metadata.json'));
      await truncate(join(dataDir, 's3', torn!), 0);
      await writeFile(join(dataDir, 'server.pid'), '2147483646');
      // Act
      const again = await startLocalStack({
        ...process.env,
        LOG_LEVEL: 'silent',
        PORT: '0',
        DATA_DIR: dataDir,
        DEMO_SEED: 'false',
      });
      try {
        const admin = (method: string, path: string, body?: unknown) =>
          fetch(`${again.url}${path}`, {
            method,
            headers: { authorization: `Bearer ${again.adminToken}`, 'content-type': 'application/json' },
            ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          });
        // Assess: the deletions finished (the key is gone), and the demo feed was created afresh
        expect((await admin('GET', '/admin/v1/feeds/half-deleted')).status).toBe(404);
        expect(await again.container.keys.get(key.body.searchId)).toBeUndefined();
        expect(
          (await admin('POST', '/admin/v1/feeds', { feedId: 'half-deleted', name: 'Again' })).status,
        ).toBe(201);
        expect(await again.container.objects.list('features/torn/')).toEqual([]);
        const minute = new Date(Date.now() + 60_000);
        expect(await again.container.imports.takeLease('gone', 'new runner', minute, new Date())).toBe(true);
        const demo = await admin('GET', '/admin/v1/feeds/demo');
        expect(demo.status).toBe(200);
        expect(again.demo.searchId).toMatch(/^vps_/);
      } finally {
        await again.close();
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
