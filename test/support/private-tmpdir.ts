import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

/**
 * Each test file's temporary files in a folder of its own (inside the run's, global-tmpdir.ts), removed
 * after its last hook: CDK's synth (a cdk.out of ~34 MB per App without an outdir), the local stacks'
 * data folders and the indexes' were left in the system's temporary folder, and hundreds of runs filled
 * the disk. os.tmpdir() reads TMPDIR at each call, so what the file (and the servers it starts) makes
 * lands here.
 */
const dir = mkdtempSync(join(tmpdir(), 'file-'));
process.env.TMPDIR = dir;

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});
