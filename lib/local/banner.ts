import { resolve } from 'node:path';
import type { LocalStack } from '#lib/local/stack.ts';

/** The demo photo the printed example searches with (served by the local server itself). */
const TRY_PHOTO = 'tools-hammer3.webp';

/** What `npm start` prints once it is ready: where it runs, the admin token, the demo feed's search id, the data folder. */
export function startBanner(stack: LocalStack, readySeconds: number): string {
  const lines = [
    '',
    `  Visual product search is running at ${stack.url}  (ready in ${readySeconds.toFixed(1)} s)`,
    '',
    `  Admin token      ${stack.adminToken}`,
    `  Demo feed        ${stack.demo.feedId}`,
    `  Demo search id   ${stack.demo.searchId}`,
    `  Data folder      ${resolve(stack.config.local.dataDir)}`,
    '',
  ];
  return `${lines.join('\n')}\n`;
}

/**
 * What it prints once the demo feed is searchable: an image search of a demo photo that runs as printed
 * (curl and base64, piped: no file, and no argument that a large photo would push past the shell's limit).
 */
export function tryBanner(stack: Pick<LocalStack, 'url' | 'demo'>): string {
  const lines = [
    '  The demo feed is ready. Try an image search with one of its photos:',
    ...tryCommand(stack).map((line) => `    ${line}`),
    '',
  ];
  return `${lines.join('\n')}\n`;
}

/** The printed image search, line by line (a shell command). */
export function tryCommand(stack: Pick<LocalStack, 'url' | 'demo'>): string[] {
  return [
    `curl -s ${stack.url}/demo/images/${TRY_PHOTO} | base64 | tr -d '\\n' |`,
    `  (printf '{"imageData":"'; cat; printf '","limit":3}') |`,
    `  curl -s ${stack.url}/api/v1/search/image -H 'Content-Type: application/json' \\`,
    `    -H 'Authorization: Bearer ${stack.demo.searchId}' -d @-`,
  ];
}
