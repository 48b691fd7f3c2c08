import { createRequire } from 'node:module';

/**
 * The prototype every LevelDB iterator of the embedded DynamoDB server (dynalite) inherits: abstract-level's
 * CommonIterator, resolved from dynalite through the packages that load it (level, classic-level), so it is
 * the copy dynalite uses.
 */
export function levelIteratorPrototype(): { close(): Promise<void>; return?: () => Promise<void> } {
  const require = createRequire(import.meta.url);
  const fromDynalite = createRequire(require.resolve('dynalite'));
  const fromLevel = createRequire(fromDynalite.resolve('level'));
  const fromClassicLevel = createRequire(fromLevel.resolve('classic-level'));
  const { AbstractValueIterator } = fromClassicLevel('abstract-level') as {
    AbstractValueIterator: { prototype: object };
  };
  return Object.getPrototypeOf(AbstractValueIterator.prototype) as ReturnType<typeof levelIteratorPrototype>;
}

/**
 * dynalite 4.0.0 ends the LevelDB iterator behind each Query and Scan stream with `iterator.return()`,
 * which abstract-level 3's iterators lack (theirs is `close()`, which "must always be called": its
 * README). So every Query left its iterator and the snapshot it holds open until the server closed:
 * ~16 KB of native memory per Query, and a local server grew ~150 KB per image search (related products'
 * group lookups are Queries), 1.4 GB in 20 minutes of a soak test. This gives the iterators the
 * `return()` dynalite calls. Idempotent; nothing else calls it.
 */
export function closeDynaliteIterators(): void {
  const prototype = levelIteratorPrototype();
  if (prototype.return) return;
  Object.defineProperty(prototype, 'return', {
    value: function (this: { close(): Promise<void> }) {
      return this.close();
    },
    configurable: true,
    writable: true,
  });
}
