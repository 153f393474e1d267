import { join } from 'node:path';
import { flagsFile, readFlagsFile } from '../flags/file-store.js';
import { FileFlagProvider } from '../flags/provider.file.js';
import type { FlagProvider } from '../flags/provider.js';
import { UnleashFlagProvider } from '../flags/provider.unleash.js';
import { defaultFlagValues, type FlagValues } from '../flags/registry.js';
import type { BrokerConfig } from './config.js';

/** The provider the configuration names (FLAGS_PROVIDER): the environment's file, or Unleash. */
export function createFlagProvider(config: BrokerConfig): FlagProvider {
  const file = flagsFile(config.flagsDir, config.flagsEnv);
  if (config.flagsProvider === 'file') return new FileFlagProvider(file, config.flagsPollMs);
  let bootstrap: FlagValues;
  try {
    bootstrap = readFlagsFile(file);
  } catch {
    bootstrap = defaultFlagValues(); // no usable file: the registry defaults are the bootstrap
  }
  return new UnleashFlagProvider({
    url: config.unleashUrl!,
    token: config.unleashToken,
    environment: config.flagsEnv,
    nodeId: config.nodeId,
    refreshMs: config.unleashRefreshMs,
    backupDir: join(config.stateDir, 'unleash', config.nodeId),
    bootstrap,
  });
}
