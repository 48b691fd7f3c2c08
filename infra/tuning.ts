/**
 * Per-stage tuning of the settings the stack otherwise leaves at the config's default (scope `default` in
 * function-environment.ts): from the stage's `tuning` (infra/stages.ts) and, over it key by key, from
 * `--context tuning='{"MIN_SCORE":"0.5"}'`. Every value is checked at synth with the config's own field
 * parser (lib/config.ts), so a typo fails `cdk synth` instead of every cold start.
 */
import { CONFIG_ENV_KEYS, ConfigError, parseConfigValue } from '#lib/config.ts';
import { ENV_SCOPE, keysOfScope, type TunableKey } from './function-environment.ts';

/** Tuned values by key: environment strings, as the functions read them. */
export type Tuning = Partial<Record<TunableKey, string>>;

/** The context key an operator passes tuning under (`--context tuning='{...}'`). */
export const TUNING_CONTEXT_KEY = 'tuning';

/**
 * The environment entries of a stage's tuning, with the context's on top. Throws one Error listing every
 * problem (unknown or untunable key, a value the config refuses, context that is not a JSON object).
 */
export function resolveTuning(stageTuning: Tuning | undefined, context: unknown): Record<string, string> {
  const problems: string[] = [];
  const merged: Record<string, string> = {};
  const add = (source: string, entries: Record<string, unknown>) => {
    for (const [key, raw] of Object.entries(entries)) {
      const problem = checkEntry(key, raw);
      if (problem) problems.push(`${source}: ${problem}`);
      else merged[key] = String(raw as string | number | boolean);
    }
  };
  if (stageTuning) add('stage tuning (infra/stages.ts)', stageTuning);
  if (context !== undefined) {
    const entries = contextEntries(context);
    if (typeof entries === 'string') problems.push(`--context ${TUNING_CONTEXT_KEY}: ${entries}`);
    else add(`--context ${TUNING_CONTEXT_KEY}`, entries);
  }
  if (problems.length) {
    throw new Error(
      `Invalid tuning:\n- ${problems.join('\n- ')}\nTunable keys: ${keysOfScope('default').sort().join(', ')}.`,
    );
  }
  return merged;
}

/** The problem with one tuning entry, or undefined when the config accepts it. */
function checkEntry(key: string, raw: unknown): string | undefined {
  if (!(CONFIG_ENV_KEYS as readonly string[]).includes(key))
    return `${key} is not a configuration key (lib/config.ts)`;
  const scope = (ENV_SCOPE as Readonly<Record<string, string>>)[key];
  if (scope !== 'default')
    return `${key} is not tunable (scope \`${scope}\` in infra/function-environment.ts: the stack or the runtime sets it, or it is local only)`;
  if (typeof raw !== 'string' && typeof raw !== 'number' && typeof raw !== 'boolean')
    return `${key}: give a string (or number/boolean), not ${raw === null ? 'null' : typeof raw}`;
  const value = String(raw);
  // The config reads '' as 0 or false: almost surely a mistake here; leave the key out for the default.
  if (value.trim() === '') return `${key} is empty (leave the key out to keep the default)`;
  try {
    parseConfigValue(key as TunableKey, value);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return error.message.replace(/^Invalid configuration: /, '');
  }
  return undefined;
}

/** CDK context values from the CLI are strings (JSON here); from cdk.json or an App they can be objects. */
function contextEntries(context: unknown): Record<string, unknown> | string {
  let value = context;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value) as unknown;
    } catch (error) {
      return `not JSON (${(error as Error).message}); e.g. --context ${TUNING_CONTEXT_KEY}='{"MIN_SCORE":"0.5"}'`;
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return `expected a JSON object of key → value, e.g. '{"MIN_SCORE":"0.5"}'`;
  return value as Record<string, unknown>;
}
