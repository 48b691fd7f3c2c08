/**
 * Cold first image search: a fresh process opens an already seeded local data folder, starts the stack
 * and sends one image search over HTTP (models, OpenCV and caches all cold), then a second one. Prints
 * the stack's start, the first search, the second, and the time from the process's start (Node's time
 * origin, before any module loaded) to the first answer: the DESIGN §6 cold start.
 *
 * Usage: `D=$(mktemp -d); npx tsx bench/cold-search.ts $D seed` (imports the demo feed once), then
 * `npx tsx bench/cold-search.ts $D` per measurement (each in its own process; `RERANK_TOP_N=0` for the
 * global-only pipeline). `npx tsx bench/cold-search.ts $D warm` starts the warm-up `npm start` runs once
 * serving and sends the first search 5 s later, as a user who searches a little after the start would.
 */
import { readFile } from 'node:fs/promises';
import { startLocalStack } from '#lib/local/stack.ts';

const dir = process.argv[2];
if (!dir) throw new Error('usage: tsx bench/cold-search.ts <data dir> [seed]');
const seed = process.argv[3] === 'seed';
const warm = process.argv[3] === 'warm';
const t0 = performance.now();
const stack = await startLocalStack({
  ...process.env,
  LOG_LEVEL: 'silent',
  PORT: '0',
  DATA_DIR: dir,
  DEMO_SEED: seed ? 'true' : 'false',
});
await stack.importsIdle();
const started = performance.now() - t0;
if (warm) {
  void stack.warm();
  await new Promise((resolve) => setTimeout(resolve, 5000));
}
if (!seed) {
  const body = JSON.stringify({
    imageData: (await readFile(new URL('../demo/images/tools-multimeter2.webp', import.meta.url))).toString(
      'base64',
    ),
    limit: 10,
  });
  const search = async () => {
    const t = performance.now();
    const response = await fetch(`${stack.url}/api/v1/search/image`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.demo.searchId}` },
      body,
    });
    const results = (await response.json()) as { score: number }[];
    return { ms: performance.now() - t, status: response.status, results };
  };
  const first = await search();
  const sinceProcessStart = performance.now();
  const second = await search();
  console.log(
    `RERANK_TOP_N ${stack.config.search.rerankTopN}${warm ? ', warmed for 5 s' : ''}: stack start ${started.toFixed(0)} ms, first search ` +
      `${first.ms.toFixed(0)} ms (status ${first.status}, ${first.results.length} results, top score ` +
      `${first.results[0]?.score}), second ${second.ms.toFixed(0)} ms; process start to first answer ` +
      `${sinceProcessStart.toFixed(0)} ms`,
  );
}
await stack.close();
