import { startLocalStack } from '#lib/local/stack.ts';

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
  `  Data folder      ${stack.config.local.dataDir}`,
  '',
  '  Try:',
  `    curl -s ${stack.url}/api/v1/search/image -H 'Content-Type: application/json' \\`,
  `      -H 'Authorization: Bearer ${stack.demo.searchId}' -d '{"imageData":"<base64 image>"}'`,
  '',
];
process.stdout.write(`${lines.join('\n')}\n`);

const shutdown = async () => {
  await stack.close();
  process.exit(0);
};
process.once('SIGINT', shutdown);
process.once('SIGTERM', shutdown);
