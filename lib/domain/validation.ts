import { z } from 'zod';
import { ValidationError } from '#lib/domain/errors.ts';

/** A UTF-16 surrogate without its other half: not a character, and not encodable as UTF-8. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** True when `text` holds a lone surrogate (String.prototype.isWellFormed, which Node 20's types lack). */
export function hasLoneSurrogate(text: string): boolean {
  LONE_SURROGATE.lastIndex = 0;
  return LONE_SURROGATE.test(text);
}

/**
 * Characters invisible in a list or a log line that let one text pose as another or break a line:
 * control characters, bidirectional marks and overrides (U+061C, U+200E/F, U+202A–E, U+2066–9), the
 * zero-width space, line and paragraph separators and the byte-order mark (ZWJ and ZWNJ are not among
 * them: emoji sequences and some scripts need them). Names refuse them; error messages escape them.
 */
export const HIDDEN_CHARACTERS =
  // eslint-disable-next-line no-control-regex -- control characters are what it finds
  /[\u0000-\u001f\u007f-\u009f\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

/** Whether `text` holds one of HIDDEN_CHARACTERS. */
export function hasHiddenCharacters(text: string): boolean {
  HIDDEN_CHARACTERS.lastIndex = 0;
  return HIDDEN_CHARACTERS.test(text);
}

/**
 * `text` with each of HIDDEN_CHARACTERS written as a `\\uXXXX` escape: how a message shows a value it
 * quotes from a request or a feed, so that the value cannot make it look like two lines or read backwards
 * in a dashboard or a log viewer. (Idempotent: an escape holds none of them.)
 */
export function escapeHidden(text: string): string {
  return text.replace(HIDDEN_CHARACTERS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** `text` with each lone surrogate replaced by U+FFFD (String.prototype.toWellFormed). */
export function toWellFormed(text: string): string {
  return text.replace(LONE_SURROGATE, '\uFFFD');
}

/**
 * A public request body with its fields that are null left out, and those of the objects in it (such as
 * related's `context`): read as absent, so an optional field takes its default. The interface marks them
 * "not required", and many clients write an unset field as null (Jackson, System.Text.Json, Go pointers);
 * protobuf's JSON mapping reads null so too. Two levels only, as deep as the requests' optional fields go
 * (a body nested thousands of levels deep must not exhaust the stack); arrays are kept as sent.
 */
export function nullsAsAbsent(body: unknown): unknown {
  const withoutNulls = (value: unknown, inner: (field: unknown) => unknown) =>
    isPlainObject(value)
      ? Object.fromEntries(
          Object.entries(value)
            .filter(([, field]) => field !== null)
            .map(([key, field]) => [key, inner(field)]),
        )
      : value;
  return withoutNulls(body, (field) => withoutNulls(field, (inner) => inner));
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
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
  const parsed = schema.safeParse(input, { error: plainMessage });
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.filter((issue, _, all) => !outshone(issue, all));
  // Bounded: a body of 250,000 unknown keys made a 400 larger than itself, past Lambda's 6 MB answer.
  const details = issues.slice(0, MAX_DETAILS).map((issue) => ({
    path: clipped(issue.path.map(String).join('.')) || source,
    message: clipped(issue.code === 'unrecognized_keys' ? unknownKeysMessage(issue.keys) : issue.message),
  }));
  const first = details[0];
  throw new ValidationError(first ? `Invalid ${first.path}: ${first.message}` : 'Invalid request.', details);
}

type Issue = z.core.$ZodRawIssue;

/**
 * zod's own bound of an integer (±2⁵³ − 1, `origin: 'int'`) when the schema's bound on the same field is
 * broken too: `limit: 1e300` was "must be at most 9007199254740991" first, then "must be at most 100".
 */
function outshone(issue: z.core.$ZodIssue, all: readonly z.core.$ZodIssue[]): boolean {
  const safeRange = (candidate: z.core.$ZodIssue) =>
    (candidate.code === 'too_big' || candidate.code === 'too_small') && candidate.origin === 'int';
  const samePath = (other: z.core.$ZodIssue) => other.path.join('\0') === issue.path.join('\0');
  return safeRange(issue) && all.some((other) => other !== issue && !safeRange(other) && samePath(other));
}

/** A zod type name as a client reads it ("int" → "an integer"). */
const typeName = (expected: string) => TYPE_NAMES[expected] ?? expected;

const TYPE_NAMES: Readonly<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'a boolean',
  array: 'an array',
  object: 'an object',
};

/**
 * The problem in a client's words where zod's default reads like its internals ("Too small: expected
 * string to have >=1 characters", "Invalid input: expected int, received number"). A schema's own message
 * wins over this one (zod's order); an issue not listed keeps zod's.
 */
function plainMessage(issue: Issue): string | undefined {
  switch (issue.code) {
    case 'invalid_type': {
      if (issue.input === undefined) return 'is required';
      const expected = typeName(issue.expected);
      // (A coerced query value that is no number arrives as NaN: not what the client sent, so not quoted.)
      const unquoted = typeof issue.input === 'number' && !Number.isFinite(issue.input);
      return unquoted ? `expected ${expected}` : `expected ${expected}, got ${shown(issue.input)}`;
    }
    case 'invalid_union': {
      if (issue.input === undefined) return 'is required';
      // Each branch refused the value's type alone (`string | number | boolean` given null): name them.
      const types = issue.errors.map(([first, ...rest]) =>
        first?.code === 'invalid_type' && rest.length === 0 && first.path.length === 0
          ? typeName(first.expected)
          : undefined,
      );
      if (types.length === 0 || types.some((type) => type === undefined)) return undefined;
      const names = [...new Set(types)];
      const listed = names.length > 1 ? `${names.slice(0, -1).join(', ')} or ${names.at(-1)}` : names[0];
      return `expected ${listed}, got ${shown(issue.input)}`;
    }
    case 'too_small':
    case 'too_big': {
      const small = issue.code === 'too_small';
      const bound = Number(small ? issue.minimum : issue.maximum);
      const side = small ? 'least' : 'most';
      if (issue.origin === 'string')
        return small && bound === 1 ? 'must not be empty' : `must be at ${side} ${bound} characters long`;
      if (issue.origin === 'array') return `must have at ${side} ${bound} item${bound === 1 ? '' : 's'}`;
      if (issue.origin === 'number' || issue.origin === 'int')
        return issue.inclusive
          ? `must be at ${side} ${bound}`
          : `must be ${small ? 'greater' : 'less'} than ${bound}`;
      return undefined;
    }
    case 'invalid_value': {
      const values = issue.values.slice(0, 10).map((value) => JSON.stringify(value));
      return `must be ${values.length === 1 ? values[0] : `one of ${values.join(', ')}`}${issue.values.length > 10 ? ', …' : ''}`;
    }
    default:
      return undefined;
  }
}

/** A value as a problem quotes it: numbers and short strings as they are, others by their kind. */
function shown(value: unknown): string {
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'string') return value.length > 40 ? 'a long string' : JSON.stringify(value);
  return Array.isArray(value) ? 'an array' : typeof value === 'object' ? 'an object' : typeof value;
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
