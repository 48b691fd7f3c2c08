import { z } from 'zod';
import { ValidationError } from '#lib/domain/errors.ts';

/** A UTF-16 surrogate without its other half: not a character, and not encodable as UTF-8. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** True when `text` holds a lone surrogate (String.prototype.isWellFormed, which Node 20's types lack). */
export function hasLoneSurrogate(text: string): boolean {
  LONE_SURROGATE.lastIndex = 0;
  return LONE_SURROGATE.test(text);
}

/** `text` with each lone surrogate replaced by U+FFFD (String.prototype.toWellFormed). */
export function toWellFormed(text: string): string {
  return text.replace(LONE_SURROGATE, '\uFFFD');
}

/**
 * Parses input with a zod schema; failures become one ValidationError listing every field. `source`
 * names the whole input in an error about it (an unknown key, a wrong type): the body or the query.
 */
export function parseInput<S extends z.ZodType>(
  schema: S,
  input: unknown,
  source: '(body)' | '(query)' = '(body)',
): z.infer<S> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  // Bounded: a body of 250,000 unknown keys made a 400 larger than itself, past Lambda's 6 MB answer.
  const details = parsed.error.issues.slice(0, MAX_DETAILS).map((issue) => ({
    path: clipped(issue.path.map(String).join('.')) || source,
    message: clipped(issue.code === 'unrecognized_keys' ? unknownKeysMessage(issue.keys) : issue.message),
  }));
  const first = details[0];
  throw new ValidationError(first ? `Invalid ${first.path}: ${first.message}` : 'Invalid request.', details);
}

/** At most this many field problems are listed, each message and path at most MAX_TEXT long. */
const MAX_DETAILS = 50;
const MAX_TEXT = 300;
const clipped = (text: string) => (text.length > MAX_TEXT ? `${cut(text, MAX_TEXT - 1)}…` : text);

/** The first `length` UTF-16 units of `text`, one fewer rather than half a surrogate pair. */
function cut(text: string, length: number): string {
  const code = text.charCodeAt(length - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? length - 1 : length);
}

/** zod lists every unknown key: the first few are enough to find the typo. */
function unknownKeysMessage(keys: readonly string[]): string {
  const shown = keys.slice(0, 5).map((key) => JSON.stringify(key.length > 40 ? `${cut(key, 39)}…` : key));
  const more = keys.length > shown.length ? ` and ${keys.length - shown.length} more` : '';
  return `Unrecognized key${keys.length > 1 ? 's' : ''}: ${shown.join(', ')}${more}`;
}

const NO_QUERY = z.strictObject({});

/**
 * For routes that take no query parameters: one there is a typo or an option the route does not have
 * (`?limit=1` on the feeds list returned every feed), refused like the unknown parameters of the routes
 * that take some.
 */
export function refuseQuery(query: Record<string, string | undefined> | null | undefined): void {
  parseInput(NO_QUERY, query ?? {}, '(query)');
}
