import { resolve } from 'node:path';
import { settleHeap } from '#lib/local/heap-growth.ts';
import { startLocalStack } from '#lib/local/stack.ts';

/** The demo photo the printed example searches with (served by the local server itself). */
const TRY_PHOTO = 'tools-hammer3.webp';

/** `npm start`: the whole service on this machine, no cloud. */
const started = Date.now();
const stack = await startLocalStack();
const lines = [
  '',
  `  Visual product search is running at ${stack.url}  (ready in ${((Date.now() - started) / 1000).toFixed(1)} s)`,
  '',
  `  Admin token      ${stack.adminToken}`,
  `  Demo feed        ${stack.demo.feedId}`,
  `  Demo search id   ${stack.demo.searchId}`,
  `  Data folder      ${resolve(stack.config.local.dataDir)}`,
  '',
  '  Try an image search with one of the demo photos:',
  `    curl -s ${stack.url}/demo/images/${TRY_PHOTO} | base64 -w0 |`,
  `      (printf '{"imageData":"'; cat; printf '","limit":3}') |`,
  `      curl -s ${stack.url}/api/v1/search/image -H 'Content-Type: application/json' \\`,
  `        -H 'Authorization: Bearer ${stack.demo.searchId}' -d @-`,
  '',
];
process.stdout.write(`${lines.join('\n')}\n`);
// The first search after a restart then finds the models and the feeds' indices loaded; what the loads
// left behind is collected once they are done.
void stack.warm().then(settleHeap);

const shutdown = async () => {
  await stack.close();
  process.exit(0);
};
/**
 * The first signal stops gracefully (a running import pauses at its next checkpoint). One key press can
 * arrive twice (the terminal signals the whole process group, and npm forwards its own copy): only a
 * signal over two seconds after the first forces the exit.
 */
let stoppingSince: number | undefined;
const onSignal = (signal: NodeJS.Signals) => {
  if (stoppingSince === undefined) {
    stoppingSince = Date.now();
    void shutdown();
  } else if (Date.now() - stoppingSince > 2000) {
    process.stderr.write(`${signal} again: exiting without waiting for the stop.\n`);
    process.exit(1);
  }
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
