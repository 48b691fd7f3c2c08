#!/usr/bin/env node
// Pre-script of `npm start` and `npm test`: makes a fresh clone runnable with no other command.
// Uses only Node built-ins, because it runs before dependencies exist.
// 1. Dependencies: `npm ci` when node_modules is missing or was installed from another package-lock.json.
// 2. Generated assets (models; Chromium for the browser tests): each step runs only when its output is
//    missing or stale.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const lockFile = join(root, 'package-lock.json');
const stampFile = join(root, 'node_modules', '.install-stamp');

function run(command, args) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit', env: process.env });
  if (result.status !== 0) {
    console.error(`ensure-install: '${command} ${args.join(' ')}' failed (exit ${result.status})`);
    process.exit(result.status ?? 1);
  }
}

const lockHash = createHash('sha256').update(readFileSync(lockFile)).digest('hex');
const installed = existsSync(stampFile) ? readFileSync(stampFile, 'utf8').trim() : '';
if (installed !== lockHash) {
  console.error('ensure-install: node_modules is missing or stale; running npm ci');
  run('npm', ['ci', '--no-audit', '--no-fund']);
  writeFileSync(stampFile, `${lockHash}\n`);
}

// Generated assets: [description, script that is idempotent and cheap when up to date].
// A `.sh` step is a shell script that checks its own staleness (Chromium for the browser tests: apt, as root).
const assetSteps = [
  ['models', 'layers/build.ts'],
  ['chromium', 'scripts/install-chromium.sh'],
].filter(([, script]) => existsSync(join(root, script)));
for (const [name, script] of assetSteps) {
  if (script.endsWith('.sh')) run('sh', [script]);
  else run(join(root, 'node_modules', '.bin', 'tsx'), [script, '--if-stale']);
  void name;
}
