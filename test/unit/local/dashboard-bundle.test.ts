import { mkdir, mkdtemp, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { bundler } from '#lib/local/static.ts';

describe('the dashboard bundler', () => {
  it('builds again when a module imported from outside the entry folder changes, and only then', async () => {
    // Prepare: src/main.ts imports ../shared/word.ts (as the dashboard imports lib/domain/domain-pattern.ts)
    const root = await mkdtemp(join(tmpdir(), 'bundle-'));
    await mkdir(join(root, 'src'));
    await mkdir(join(root, 'shared'));
    const shared = join(root, 'shared', 'word.ts');
    const setWord = async (word: string, modifiedAt: Date) => {
      await writeFile(shared, `export const WORD = '${word}';\n`);
      await utimes(shared, modifiedAt, modifiedAt);
    };
    await setWord('first', new Date(Date.now() - 60_000));
    const main = join(root, 'src', 'main.ts');
    await writeFile(main, "import { WORD } from '../shared/word.ts';\nconsole.log(WORD);\n");
    // (Dated in the past too: a file system's clock may stamp it at or after the build's start.)
    await utimes(main, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    const script = bundler(main);
    expect(await script()).toContain('first');
    // Act + Assess: changed under an older modification time, the bundle is kept; modified since, rebuilt
    await setWord('second', new Date(Date.now() - 60_000));
    expect(await script()).toContain('first');
    await setWord('third', new Date(Date.now() + 1000));
    const thirdBuiltFrom = Date.now();
    expect(await script()).toContain('third');
    // Stamped a little before the last build began (a file system's clock lags), still a change
    await setWord('fourth', new Date(thirdBuiltFrom - 100));
    expect(await script()).toContain('fourth');
  });
});
