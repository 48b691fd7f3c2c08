import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * One temporary folder for the whole run, removed when it ends: the test processes inherit it as their
 * TMPDIR, and each file's own folder inside it goes after the file (private-tmpdir.ts); what a file
 * leaves anyway (one whose tests are all skipped runs no hooks) goes here.
 */
export default function setup(): () => void {
  const root = mkdtempSync(join(tmpdir(), 'vps-vitest-'));
  process.env.TMPDIR = root;
  return () => rmSync(root, { recursive: true, force: true });
}
