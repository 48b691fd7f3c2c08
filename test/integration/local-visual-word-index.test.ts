import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalVisualWordIndex } from '#lib/adapters/local-visual-word-index.ts';
import { describeVisualWordIndexContract } from './visual-word-index.contract.ts';

describeVisualWordIndexContract(
  'local files',
  async () => {
    const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
    return {
      index: new LocalVisualWordIndex(dir),
      reopen: async () => new LocalVisualWordIndex(dir),
      close: () => rm(dir, { recursive: true, force: true }),
    };
  },
  { persistent: true },
);
