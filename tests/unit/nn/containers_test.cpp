// ModuleList, ModuleDict, Identity, named_modules() and apply(): names as PyTorch gives them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A model with a list of blocks and a dictionary of heads, as a user writes one.
class Net : public nn::Module {
 public:
  Net() {
    Generator gen(1);
    blocks_ = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks_->push_back(std::make_shared<nn::Linear>(4, 4, true, gen)).push_back(std::make_shared<nn::Identity>());
    heads_ = register_module("heads", std::make_shared<nn::ModuleDict>(
                                          std::initializer_list<std::pair<std::string, std::shared_ptr<nn::Module>>>{
                                              {"cls", std::make_shared<nn::Linear>(4, 2, true, gen)},
                                              {"reg", std::make_shared<nn::Linear>(4, 1, false, gen)}}));
  }
  Variable forward(const Variable& x) override {
    Variable h = x;
    for (const auto& block : *blocks_) h = (*block)(h);
    return heads_->at<nn::Linear>("cls")->forward(h);
  }
  std::shared_ptr<nn::ModuleList> blocks_;
  std::shared_ptr<nn::ModuleDict> heads_;
};

TEST(Containers, NameParametersAsPyTorchsModuleListAndModuleDict) {
  Net net;
  std::vector<std::string> names;
  for (const auto& [name, p] : net.named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("blocks.0.weight", "blocks.0.bias", "heads.cls.weight", "heads.cls.bias",
                                 "heads.reg.weight"));
  EXPECT_EQ(net(Variable(Tensor::ones({3, 4}))).shape(), (Shape{3, 2}));
  EXPECT_EQ(net.blocks_->size(), 2u);
  EXPECT_THAT(net.heads_->keys(), ElementsAre("cls", "reg"));
  EXPECT_TRUE(net.heads_->contains("reg"));
  EXPECT_FALSE(net.heads_->contains("box"));
}

TEST(Containers, RefuseBadAccessNamingWhatWasExpected) {
  Net net;
  DPL_EXPECT_ERROR((*net.blocks_)[2], HasSubstr("ModuleList: expected an index < 2, got 2"));
  DPL_EXPECT_ERROR(net.blocks_->at<nn::Linear>(1),
                   HasSubstr("expected the module at 1 to be a dpl::nn::Linear, got a dpl::nn::Identity"));
  DPL_EXPECT_ERROR((*net.heads_)["box"], HasSubstr("expected one of the keys 'cls', 'reg', got 'box'"));
  DPL_EXPECT_ERROR(net.heads_->insert("cls", std::make_shared<nn::Identity>()), HasSubstr("cls"));
  DPL_EXPECT_ERROR(net.heads_->insert("a.b", std::make_shared<nn::Identity>()), HasSubstr("a.b"));
  DPL_EXPECT_ERROR(net.blocks_->push_back(nullptr), HasSubstr("expected a module, got null"));
  DPL_EXPECT_ERROR((*net.blocks_)(Variable(Tensor::ones({1, 4}))), HasSubstr("ModuleList"));
}

TEST(Module, NamedModulesListsEveryModuleOnceDepthFirst) {
  Net net;
  std::vector<std::string> names;
  for (const auto& [name, m] : net.named_modules()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("", "blocks", "blocks.0", "blocks.1", "heads", "heads.cls", "heads.reg"));
  EXPECT_EQ(net.named_modules()[0].second, &net);
}

TEST(Module, ApplyVisitsChildrenFirstAndInitialisesInPlace) {
  Net net;
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) {
    order.push_back(nn::type_name(typeid(m)));
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::zeros_(linear->weight());
      if (linear->bias().defined()) nn::init::ones_(linear->bias());
    }
  });
  EXPECT_THAT(order, ElementsAre("dpl::nn::Linear", "dpl::nn::Identity", "dpl::nn::ModuleList", "dpl::nn::Linear",
                                 "dpl::nn::Linear", "dpl::nn::ModuleDict", "(anonymous namespace)::Net"));
  for (float v : net(Variable(Tensor::ones({1, 4}))).data().to_vector<float>()) EXPECT_EQ(v, 1.f);
  EXPECT_EQ(net.heads_->at<nn::Linear>("cls")->own_parameters().size(), 2u);
}

}  // namespace
