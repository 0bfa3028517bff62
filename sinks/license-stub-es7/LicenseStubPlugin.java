/*
 * An Elasticsearch 7 plugin for the benchmarks only: one REST handler,
 * `GET /_license`, answering what an Elasticsearch cluster with the basic
 * license answers. Filebeat asks for it when it connects and refuses a
 * server without it. Nothing else of Elasticsearch changes (its default
 * distribution has this API in x-pack, which the Maven artifact lacks).
 */
package dev.leasehold.sinks.licensestubes7;

import java.util.List;
import java.util.function.Supplier;

import org.elasticsearch.cluster.metadata.IndexNameExpressionResolver;
import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.common.settings.ClusterSettings;
import org.elasticsearch.common.settings.IndexScopedSettings;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.common.settings.SettingsFilter;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.RestController;
import org.elasticsearch.rest.RestHandler;

public class LicenseStubPlugin extends Plugin implements ActionPlugin {
    @Override
    public List<RestHandler> getRestHandlers(
        Settings settings,
        RestController restController,
        ClusterSettings clusterSettings,
        IndexScopedSettings indexScopedSettings,
        SettingsFilter settingsFilter,
        IndexNameExpressionResolver indexNameExpressionResolver,
        Supplier<DiscoveryNodes> nodesInCluster
    ) {
        return List.of(new GetLicenseHandler());
    }
}
