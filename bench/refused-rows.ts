/**
 * `npm run bench:refused-rows`: how long the local stack takes to import a file of refused rows (junk: no
 * title, no price), BENCH_REFUSED_ROWS of them (100,000), over HTTP (inline JSON
 * Lines), and how many times the import record was saved. A chunk whose rows were all refused writes
 * nothing, so its progress is saved with the next save instead of its own (lib/ingest/run-import.ts, Save).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLocalStack } from '#lib/local/stack.ts';

const ROWS = Number(process.env.BENCH_REFUSED_ROWS ?? 100_000);

const dataDir = await mkdtemp(join(tmpdir(), 'vps-bench-refused-'));
const stack = await startLocalStack({
  ...process.env,
  LOG_LEVEL: 'silent',
  PORT: '0',
  DATA_DIR: dataDir,
  DEMO_SEED: 'false',
});
try {
  const admin = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${stack.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${stack.adminToken}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
    return (await response.json()) as Record<string, unknown>;
  };
  const { feedId } = await admin('POST', '/admin/v1/feeds', { name: 'Refused rows', plan: 'pro' });
  const rows = Array.from({ length: ROWS }, (_, i) => JSON.stringify({ id: `junk-${i}` }));
  let saves = 0;
  const put = stack.container.imports.put.bind(stack.container.imports);
  stack.container.imports.put = async (record) => {
    saves += 1;
    return put(record);
  };
  const start = performance.now();
  const { importId } = await admin('POST', `/admin/v1/feeds/${feedId}/imports`, {
    format: 'jsonl',
    content: rows.join('\n'),
  });
  let record: Record<string, unknown>;
  do {
    await new Promise((resolve) => setTimeout(resolve, 50));
    record = await admin('GET', `/admin/v1/feeds/${feedId}/imports/${importId}`);
  } while (record.status === 'queued' || record.status === 'running');
  const ms = performance.now() - start;
  console.log(
    `${ROWS} refused rows: ${(ms / 1000).toFixed(2)} s (${record.status}, processed ${record.processed}, ` +
      `failed ${record.failed}), import record saved ${saves} times`,
  );
} finally {
  await stack.close();
  await rm(dataDir, { recursive: true, force: true });
}
