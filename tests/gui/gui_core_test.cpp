// gui/core without widgets: the plan document, the item models (QAbstractItemModelTester), the
// timeline's time<->pixel maths, trace reading, sweep axes and the Pareto front.
#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QtTest/QtTest>
#include <cmath>

#include "gui/core/comparison_model.hpp"
#include "gui/core/diagnostics_model.hpp"
#include "gui/core/field_table_model.hpp"
#include "gui/core/figures.hpp"
#include "gui/core/pareto.hpp"
#include "gui/core/plan_document.hpp"
#include "gui/core/sweep_axis.hpp"
#include "gui/core/sweep_table_model.hpp"
#include "gui/core/timeline.hpp"
#include "models/estimate.hpp"
#include "plan/field_catalogue.hpp"

using namespace meshwork;
using namespace meshwork::gui;

namespace {
const std::string kSource = MESHWORK_SOURCE_DIR;
const std::string kDefault = kSource + "/scenarios/gpt3-175b-a100-1024.yaml";
}  // namespace

class GuiCoreTest : public QObject {
  Q_OBJECT
 private slots:
  void catalogue_covers_the_schema() {
    const auto& c = plan::field_catalogue();
    QVERIFY(c.fields.size() > 60);
    auto find = [&](const std::string& path) -> const plan::FieldEntry* {
      for (const auto& f : c.fields) {
        if (f.path == path) return &f;
      }
      return nullptr;
    };
    const auto* tp = find("parallelism.tensor_model_parallel_size");
    QVERIFY(tp != nullptr);
    QCOMPARE(tp->kind, plan::FieldKind::integer);
    QCOMPARE(QString::fromStdString(tp->aliases), QString("tp"));
    const auto* act = find("model.activation");
    QVERIFY(act != nullptr);
    QCOMPARE(act->kind, plan::FieldKind::choice);
    QCOMPARE(act->choices, (std::vector<std::string>{"gelu", "swiglu"}));
    QVERIFY(find("cluster.gpu.preset") != nullptr);
    QVERIFY(std::find(c.lists.begin(), c.lists.end(), "failures.events") != c.lists.end());
    // Every field's section is listed, so the editor can reach every field.
    for (const auto& f : c.fields) QVERIFY2(std::find(c.sections.begin(), c.sections.end(), f.section) != c.sections.end(), f.path.c_str());
  }

  void document_sets_fields_by_alias_and_keeps_presets() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    QVERIFY(doc.valid());
    QVERIFY(!doc.modified());
    const nlohmann::json tp_before = doc.resolved("parallelism.tp");
    QCOMPARE(tp_before.get<int>(), 8);
    QVERIFY(doc.set("tp", "4", error) == false);  // not a path: sections are needed
    QVERIFY(doc.set("parallelism.tp", "4", error));
    QCOMPARE(doc.written("parallelism.tensor_model_parallel_size").get<int>(), 4);
    QCOMPARE(doc.resolved("parallelism.tensor_model_parallel_size").get<int>(), 4);
    QVERIFY(doc.modified());
    // Only one spelling remains in the tree.
    const auto& par = doc.tree()["parallelism"];
    QVERIFY(!(par.contains("tp") && par.contains("tensor_model_parallel_size")));
    // Setting a field of a section given as a preset name keeps the preset.
    QVERIFY(doc.set("cluster.gpu.hbm_gib", "96", error));
    QVERIFY(doc.tree()["cluster"]["gpu"].is_object());
    QVERIFY(doc.tree()["cluster"]["gpu"].contains("preset") || doc.tree()["cluster"]["gpu"].contains("name"));
    QCOMPARE(doc.resolved("cluster.gpu.hbm_gib").get<double>(), 96.0);
    doc.unset("cluster.gpu.hbm_gib");
    QVERIFY(doc.written("cluster.gpu.hbm_gib").is_null());
    QCOMPARE(doc.resolved("cluster.gpu.hbm_gib").get<double>(), 80.0);
  }

  void an_invalid_value_names_its_field() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    QVERIFY(doc.set("parallelism.tp", "0", error));
    QVERIFY(!doc.valid());
    bool named = false;
    for (const auto& d : doc.loaded().diagnostics.items()) named = named || d.path == "parallelism.tensor_model_parallel_size";
    QVERIFY(named);
    QVERIFY(doc.diagnostic("parallelism.tensor_model_parallel_size") != nullptr);
  }

  // The execution backend's limits (plan/backend_limits, as `validate --backend` says them)
  // become warnings on their fields, and only while a backend is chosen.
  void a_chosen_backend_names_what_it_cannot_run() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    QVERIFY(doc.valid());
    const std::size_t before = doc.diagnostics().items().size();
    QVERIFY(doc.diagnostic("parallelism.tensor_model_parallel_size") == nullptr);
    // GPT-3 on 1,024 A100s, TP 8 x PP 8 x DP 16: a dense mesh both backends run (one Trainer).
    doc.set_backend(plan::Backend::cuda);
    QVERIFY(doc.valid());
    QCOMPARE(doc.diagnostics().items().size(), before);
    // Several distributed-optimizer instances (of ZeRO-1): priced by the estimate and the
    // simulator, run by neither backend.
    QVERIFY2(doc.set("parallelism.zero_stage", "1", error), error.c_str());
    QVERIFY2(doc.set("parallelism.num_distributed_optimizer_instances", "2", error), error.c_str());
    QVERIFY(doc.valid());
    const plan::Diagnostic* instances = doc.diagnostic("parallelism.num_distributed_optimizer_instances");
    QVERIFY(instances != nullptr);
    QCOMPARE(instances->severity, plan::Severity::warning);
    QVERIFY(instances->message.starts_with("execute --backend cuda: "));
    doc.set_backend(plan::Backend::cpu);
    QVERIFY(doc.diagnostic("parallelism.num_distributed_optimizer_instances") != nullptr);
    doc.set_backend(std::nullopt);
    QVERIFY(doc.diagnostic("parallelism.num_distributed_optimizer_instances") == nullptr);
  }

  void document_save_writes_json_that_reopens() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    QVERIFY(doc.set("training.micro_batch_size", "2", error));
    QTemporaryDir dir;
    const std::string file = (dir.path() + "/plan.json").toStdString();
    QVERIFY2(doc.save(file, error), error.c_str());
    PlanDocument again;
    QVERIFY(again.open(file, error));
    QVERIFY(again.valid());
    QCOMPARE(again.resolved("training.micro_batch_size").get<int>(), 2);
    QVERIFY(!doc.open(kSource + "/no/such/plan.yaml", error));
    QVERIFY(!error.empty());
    QCOMPARE(doc.resolved("training.micro_batch_size").get<int>(), 2);  // unchanged by the failed open
  }

  void field_model_passes_the_tester_in_every_section() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    FieldTableModel model(&doc);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    for (const auto& s : plan::field_catalogue().sections) {
      model.set_section(QString::fromStdString(s));
      QVERIFY(model.rowCount() > 0 || s.empty() || true);
    }
    model.set_section("parallelism");
    const int row = model.row_of("parallelism.tensor_model_parallel_size");
    QVERIFY(row >= 0);
    const QModelIndex value = model.index(row, FieldTableModel::value_column);
    QCOMPARE(value.data().toString(), QString("8"));
    QVERIFY(model.flags(value) & Qt::ItemIsEditable);
    QSignalSpy edited(&model, &FieldTableModel::edited);
    QVERIFY(model.setData(value, "0"));
    QCOMPARE(edited.count(), 1);
    QVERIFY(!value.data(FieldTableModel::diagnostic_role).toString().isEmpty());
    QVERIFY(value.data(Qt::BackgroundRole).isValid());
    QVERIFY(model.setData(value, "4"));
    QVERIFY(value.data(FieldTableModel::diagnostic_role).toString().isEmpty());
    // An empty value unsets the field: the plan's default shows again, greyed.
    QVERIFY(model.setData(value, ""));
    QVERIFY(!value.data(FieldTableModel::written_role).toBool());
    QVERIFY(value.data(Qt::ForegroundRole).isValid());
  }

  void diagnostics_model_lists_every_problem() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    QVERIFY(doc.set("parallelism.tp", "0", error));
    DiagnosticsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.set_diagnostics(doc.loaded().diagnostics);
    QCOMPARE(static_cast<std::size_t>(model.rowCount()), doc.loaded().diagnostics.items().size());
    QVERIFY(model.rowCount() > 0);
    model.set_diagnostics({});
    QCOMPARE(model.rowCount(), 0);
  }

  void sweep_model_sorts_numerically() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    std::vector<models::SweepRow> rows;
    for (int tp : {1, 2, 4, 8, 16}) {
      QVERIFY(doc.set("parallelism.tp", std::to_string(tp), error));
      models::SweepRow r;
      r.index = rows.size();
      r.values = {std::to_string(tp)};
      if (doc.valid()) {
        r.report = models::estimate(doc.loaded().plan);
        r.status = r.report.fits ? models::PointStatus::ok : models::PointStatus::out_of_memory;
      } else {
        r.status = models::PointStatus::invalid;
        r.reason = doc.loaded().diagnostics.items().front().message;
      }
      rows.push_back(r);
    }
    SweepTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.set_rows({"tp"}, rows, 2.0);
    QCOMPARE(model.rowCount(), 5);
    QCOMPARE(model.columnCount(), 1 + SweepTableModel::figure_count);
    QCOMPARE(model.index(4, 0).data(Qt::UserRole).toDouble(), 16.0);
    const int mfu = model.figure_column(SweepTableModel::mfu_figure);
    QVERIFY(model.index(3, mfu).data(Qt::UserRole).toDouble() > 0);
    model.set_price(0);
    QCOMPARE(model.index(3, model.figure_column(SweepTableModel::cost_figure)).data(Qt::UserRole).toDouble(), 0.0);
  }

  void pinned_and_comparison_models() {
    PlanDocument doc;
    std::string error;
    QVERIFY(doc.open(kDefault, error));
    const report::Report a = models::estimate(doc.loaded().plan);
    QVERIFY(doc.set("parallelism.pp", "8", error));
    QVERIFY(doc.set("parallelism.dp", "16", error) || true);
    PinnedPlansModel pins;
    QAbstractItemModelTester tester(&pins, QAbstractItemModelTester::FailureReportingMode::QtTest);
    for (int i = 0; i < 5; ++i) pins.pin(QString("plan %1").arg(i), a);
    QCOMPARE(pins.columnCount(), PinnedPlansModel::kMaxPinned);
    QCOMPARE(pins.headerData(0, Qt::Horizontal).toString(), QString("plan 1"));  // the oldest went
    report::Report measured = a;
    measured.method = report::Method::measured;
    measured.step_time_s *= 1.1;
    measured.breakdown.compute_s += 0.1 * a.step_time_s;
    ComparisonModel cmp;
    QAbstractItemModelTester tester2(&cmp, QAbstractItemModelTester::FailureReportingMode::QtTest);
    cmp.set_comparison(report::compare(a, measured));
    QVERIFY(cmp.rowCount() > 3);
    QCOMPARE(cmp.index(0, ComparisonModel::what_column).data().toString(), QString("step_time_s"));
    QVERIFY(std::abs(cmp.index(0, ComparisonModel::error_column).data(Qt::UserRole).toDouble() - 0.1 / 1.1) < 1e-9);
  }

  void figures_add_up() {
    report::Report r;
    r.num_gpus = 1024;
    r.step_time_s = 10;
    r.time_to_train_s = 3600 * 24;
    r.power.cluster_megawatts = 0.5;
    r.breakdown.compute_s = 6;
    r.breakdown.tp_s = 1;
    r.breakdown.bubble_s = 3;
    const auto bars = waterfall(r.breakdown);
    QCOMPARE(bars.size(), std::size_t{3});
    QCOMPARE(bars[1].start_s, 6.0);
    QCOMPARE(bars.back().start_s + bars.back().length_s, r.breakdown.total());
    const Headline h = headline(r, 2.0);
    QCOMPARE(h.gpu_hours, 1024.0 * 24);
    QCOMPARE(h.cost_usd, 1024.0 * 24 * 2);
    QCOMPARE(h.energy_mwh, 12.0);
    QCOMPARE(headline(r, 0).cost_usd, 0.0);
    QCOMPARE(QString::fromStdString(human_duration(0.0123)), QString("12.3 ms"));
    QCOMPARE(QString::fromStdString(human_duration(5 * 86400)), QString("5.0 days"));
  }

  void timeline_scale_maps_and_zooms_about_the_cursor() {
    TimelineScale s;
    s.total_s = 10;
    s.width_px = 1000;
    s.reset();
    QCOMPARE(s.to_px(5), 500.0);
    QCOMPARE(s.to_s(250), 2.5);
    s.zoom(4, 250);  // the time under pixel 250 stays there
    QVERIFY(std::abs(s.to_s(250) - 2.5) < 1e-12);
    QVERIFY(std::abs(s.span_s() - 2.5) < 1e-12);
    s.pan(-10000);  // cannot leave the start
    QCOMPARE(s.start_s, 0.0);
    s.pan(1e9);  // nor the end
    QVERIFY(std::abs(s.end_s - 10) < 1e-12);
    s.zoom(1e-6, 0);  // nor zoom out past the whole
    QVERIFY(std::abs(s.span_s() - 10) < 1e-12);
    s.zoom(1e12, 500);  // nor in past the floor
    QVERIFY(std::abs(s.span_s() - s.min_span_s) < 1e-15);
  }

  void trace_is_read_into_rows() {
    const char* text = R"json({"traceEvents":[
      {"ph":"M","name":"process_name","pid":0,"args":{"name":"rank 0 (stage 0)"}},
      {"ph":"M","name":"thread_name","pid":0,"tid":0,"args":{"name":"compute"}},
      {"ph":"X","name":"backward","pid":0,"tid":0,"ts":3000,"dur":2000,"args":{"microbatch":1}},
      {"ph":"X","name":"forward","pid":0,"tid":0,"ts":0,"dur":1000},
      {"ph":"X","name":"send","pid":1,"tid":3,"ts":1000,"dur":500}]})json";
    const Timeline t = read_trace(text);
    QCOMPARE(t.rows.size(), std::size_t{2});
    QCOMPARE(QString::fromStdString(t.rows[0].label), QString("rank 0 (stage 0) compute"));
    QCOMPARE(QString::fromStdString(t.rows[0].events[0].name), QString("forward"));  // sorted by start
    QCOMPARE(t.rows[0].events[1].microbatch, 1);
    QCOMPARE(t.end_s, 0.005);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, read_trace("not json"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, read_trace(R"({"other":1})"));
  }

  void sweep_axes_parse() {
    std::string error;
    auto v = parse_axis_values("8..64 *2", error);
    QCOMPARE(v.size(), std::size_t{4});
    QCOMPARE(v.back().get<int>(), 64);
    v = parse_axis_values("1..4 +1", error);
    QCOMPARE(v.size(), std::size_t{4});
    v = parse_axis_values("selective, full", error);
    QCOMPARE(v[1].get<std::string>(), std::string("full"));
    QVERIFY(parse_axis_values("1..4", error).empty());
    QVERIFY(error.find("step") != std::string::npos);
    QVERIFY(parse_axis_values("1..1e9 +1", error).empty());
    QVERIFY(parse_axis_values("1,,2", error).empty());
    plan::SweepAxis axis;
    QVERIFY(make_axis("parallelism.tp", "1, 2", axis, error));
    QCOMPARE(QString::fromStdString(axis.path), QString("parallelism.tensor_model_parallel_size"));
    QVERIFY(!make_axis("parallelism.nope", "1", axis, error));
    QVERIFY(error.find("parallelism.nope") != std::string::npos);
  }

  void pareto_front_keeps_the_undominated() {
    const std::vector<CostPoint> p = {{10, 5}, {5, 10}, {6, 9}, {7, 11}, {10, 5}, {20, 1}, {6, 9.5}};
    const auto front = pareto_front(p);
    QCOMPARE(front, (std::vector<std::size_t>{1, 2, 0, 5}));
    QVERIFY(pareto_front({}).empty());
  }
};

QTEST_GUILESS_MAIN(GuiCoreTest)
#include "gui_core_test.moc"
