import { startBanner, tryBanner } from '#lib/local/banner.ts';
import { settleHeap } from '#lib/local/heap-growth.ts';
import { startLocalStack } from '#lib/local/stack.ts';

/** `npm start`: the whole service on this machine, no cloud. */
const started = Date.now();
const stack = await startLocalStack();
process.stdout.write(startBanner(stack, (Date.now() - started) / 1000));
// The example searches the demo feed: printed once its import has made it searchable.
void stack.demoSeeded().then((seeded) => {
  if (seeded) process.stdout.write(tryBanner(stack));
});
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
