/*
 * `GET /_license`: a basic license, active, without an expiry date (as
 * Elasticsearch reports its basic license). Its uid is fixed, so that a
 * client that compares the license it fetched with the last one sees no
 * change; its issue date is the node's start.
 */
package dev.leasehold.sinks.licensestubes7;

import java.time.Instant;
import java.util.List;

import org.elasticsearch.client.node.NodeClient;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.BytesRestResponse;
import org.elasticsearch.rest.RestRequest;

public class GetLicenseHandler extends BaseRestHandler {
    static final String UID = "6f1c2a57-3d0e-4b8a-9c41-2e7d5b90a3f6";

    private final long issued = System.currentTimeMillis();

    @Override
    public String getName() {
        return "license_stub_get_license";
    }

    @Override
    public List<Route> routes() {
        return List.of(new Route(RestRequest.Method.GET, "/_license"));
    }

    @Override
    protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
        // Elasticsearch's parameters of this API: accepted, and of no
        // consequence here.
        request.paramAsBoolean("local", false);
        request.paramAsBoolean("accept_enterprise", false);
        return channel -> {
            XContentBuilder b = channel.newBuilder();
            b.startObject();
            b.startObject("license");
            b.field("status", "active");
            b.field("uid", UID);
            b.field("type", "basic");
            b.field("issue_date", Instant.ofEpochMilli(issued).toString());
            b.field("issue_date_in_millis", issued);
            b.field("max_nodes", 1000);
            b.field("issued_to", "leasehold-elasticsearch7");
            b.field("issuer", "elasticsearch");
            b.field("start_date_in_millis", -1);
            b.field("mode", "basic");
            b.endObject();
            b.endObject();
            channel.sendResponse(new BytesRestResponse(RestStatus.OK, b));
        };
    }
}
