import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { modelFiles } from '../../infra/constructs/layers.ts';
import { addService } from '../../infra/service.ts';

describe('synth guards', () => {
  it('skips the import worker with a warning while its module does not exist', () => {
    // Prepare + Act
    const app = new App();
    const { api } = addService(app, 'dev', {
      codeMode: 'inline',
      nativeLayer: 'stub',
      importWorkerEntry: 'functions/not-written-yet.ts',
    });

    // Assess
    const names = Object.values(Template.fromStack(api).findResources('AWS::Lambda::Function')).map(
      (fn) => (fn.Properties as { FunctionName: string }).FunctionName,
    );
    expect(names).not.toContain('vps-dev-ImportWorker');
    Annotations.fromStack(api).hasWarning(
      '*',
      Match.stringLikeRegexp('functions/not-written-yet.ts does not exist yet'),
    );
  });

  it('fails with the build command when the model layer is not built', () => {
    const empty = mkdtempSync(join(tmpdir(), 'vps-models-'));
    try {
      expect(() => modelFiles(empty)).toThrow(/npm run build:layer/);
      expect(() => modelFiles(join(empty, 'missing'))).toThrow(/not built/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it('refuses a route whose handler module does not exist', () => {
    const app = new App();
    expect(() =>
      addService(app, 'dev', {
        codeMode: 'inline',
        nativeLayer: 'stub',
        routes: [
          {
            name: 'Ghost',
            method: 'GET',
            path: '/ghost',
            entry: 'functions/ghost.ts',
            handler: 'handler',
            access: 'admin',
          },
        ],
      }),
    ).toThrow(/functions\/ghost.ts does not exist/);
  });
});
